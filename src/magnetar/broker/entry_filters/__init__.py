"""Entry filters (PIP-105): plugins that decide, per subscription, whether an entry is
delivered, acknowledged unseen, or tried again later, reading only its metadata.

A filter sees the entry's position, its MessageMetadata (parsed once by dispatch anyway)
and its broker entry metadata, never the payload: on a batch it judges the batch-level
properties, which a producer using `batched_filter_properties` (PIP-191) groups its
batches by. Filters are entry points of the `magnetar.entry_filters` group, named by
`entryFilterNames` (broker; also `package.module:Class`), or by namespace and topic
policies when `allowOverrideEntryFilters` lets them, which may name only the installed
filters and those of `entryFilterNames` (see magnetar.plugins). Several chain: the first
answer other than ACCEPT wins. A filter that raises counts as ACCEPT and is logged at
most once a minute.

Layer rule: a feature; imports policies, config and errors, never another feature nor
topics, transport, monitors or service.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from magnetar.broker.errors import BrokerServiceError
from magnetar.plugins import AllowList, PluginError, PluginGroup
from magnetar.storage import Position
from magnetar.wire.entry import peek_broker_entry_metadata
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "magnetar.entry_filters"
FILTER_PLUGINS = PluginGroup("entry filter", ENTRY_POINT_GROUP,
                            {"selector": "magnetar.broker.entry_filters.selector_filter:SelectorEntryFilter"})
_ERROR_LOG_INTERVAL_SECONDS = 60.0


class FilterResult(enum.Enum):
    ACCEPT = "accept"
    REJECT = "reject"
    RESCHEDULE = "reschedule"


@dataclass(slots=True)
class FilterEntry:
    """What a filter may look at: never the payload."""

    position: Position
    metadata: pb.MessageMetadata
    data: bytes = field(repr=False)
    _properties: dict[str, str] | None = field(default=None, repr=False)

    @property
    def properties(self) -> Mapping[str, str]:
        """The MessageMetadata properties: a batch's own, set by batched filter properties."""
        if self._properties is None:
            self._properties = {kv.key: kv.value for kv in self.metadata.properties}
        return self._properties

    @property
    def broker_entry_metadata(self) -> pb.BrokerEntryMetadata | None:
        return peek_broker_entry_metadata(self.data)


@dataclass(frozen=True, slots=True)
class FilterContext:
    topic: str
    subscription: str
    subscription_properties: Mapping[str, str]
    consumer: str | None = None
    consumer_metadata: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class EntryFilter(Protocol):
    def filter_entry(self, entry: FilterEntry, context: FilterContext) -> FilterResult: ...


class SubscriptionCheck(Protocol):
    """Optional: a filter that can refuse a SUBSCRIBE it could never judge (a bad selector)."""

    def check_subscription(self, context: FilterContext) -> None: ...


def load_entry_filter(name: str, allowed: AllowList | None = None) -> EntryFilter:
    """A filter instantiated with no arguments: by any name the operator may write (an
    entry point, `package.module:Class`), or only by one of `allowed`."""
    factory = FILTER_PLUGINS.load(name) if allowed is None else allowed.load(name)
    instance = factory()
    if not isinstance(instance, EntryFilter):
        raise PluginError(f"entry filter {name!r} has no filter_entry(entry, context)")
    return instance


class EntryFilterChain:
    """The filters of one topic, in order."""

    def __init__(self, filters: Sequence[tuple[str, EntryFilter]]) -> None:
        self.filters = list(filters)
        self._errors_logged_at: dict[str, float] = {}

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.filters]

    def judge(self, entry: FilterEntry, context: FilterContext) -> FilterResult:
        for name, entry_filter in self.filters:
            try:
                result = entry_filter.filter_entry(entry, context)
            except Exception:
                self._log_failure(name, context)
                continue
            if result is not FilterResult.ACCEPT:
                return result
        return FilterResult.ACCEPT

    def check_subscription(self, context: FilterContext) -> None:
        for name, entry_filter in self.filters:
            check = getattr(entry_filter, "check_subscription", None)
            if check is None:
                continue
            try:
                check(context)
            except ValueError as exc:
                raise BrokerServiceError(pb.NotAllowedError, f"entry filter {name}: {exc}") from None

    def _log_failure(self, name: str, context: FilterContext) -> None:
        now = time.monotonic()
        if now - self._errors_logged_at.get(name, -_ERROR_LOG_INTERVAL_SECONDS) >= _ERROR_LOG_INTERVAL_SECONDS:
            self._errors_logged_at[name] = now
            log.exception("entry filter %s failed on %s/%s; the entry is accepted (logged once a minute)",
                          name, context.topic, context.subscription)


class EntryFilterProvider:
    """Loads each named filter once per broker and hands topics their chains. The names
    come from policies, which users set: only the installed filters and those of
    `entryFilterNames` resolve (one allow list, built with the broker)."""

    def __init__(self, configured: Sequence[str] = ()) -> None:
        self.allowed = FILTER_PLUGINS.allow_list(configured, ", or one entryFilterNames names")
        self._loaded: dict[str, EntryFilter] = {}
        self._refused: set[str] = set()

    def check(self, names: Sequence[str]) -> None:
        """PluginError unless every name is an allowed filter (loading it, which proves it)."""
        for name in names:
            self._load(name)

    def chain(self, names: Sequence[str]) -> EntryFilterChain | None:
        """The filters of `names` that load; one that does not (a policy stored by an older
        broker naming anything at all) is left out and logged once, never imported."""
        filters = []
        for name in names:
            try:
                filters.append((name, self._load(name)))
            except PluginError as exc:
                if name not in self._refused:
                    self._refused.add(name)
                    log.error("entry filter policy ignored: %s", exc)
        return EntryFilterChain(filters) if filters else None

    def _load(self, name: str) -> EntryFilter:
        if name not in self._loaded:
            self._loaded[name] = load_entry_filter(name, self.allowed)
        return self._loaded[name]


def parse_names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]
