"""Protocol handlers: other wire protocols served by the same broker onto the same topics.

Pulsar loads a protocol handler (KoP, MoP, AoP) from a NAR named by `messagingProtocols`;
magnetar loads a class from the `magnetar.protocol_handlers` entry-point group by the same
key. The broker never imports a handler. A handler sees the broker only through
`HandlerBroker` and one partition only through `PartitionLog`: publish entries, read them by
PIP-70 offset, find an offset by time, wait for appends, create and delete topics. That
keeps BrokerService's internals free to change under it.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.auth.authentication import AuthenticationService
from magnetar.broker.auth.authorization import Resource
from magnetar.broker.auth.operations import Operation
from magnetar.broker.config import ConfigError, ServiceConfiguration
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.tls import TlsConfigError, server_context
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.topics.topic_limits import encryption_required
from magnetar.storage import Position, bump_counter
from magnetar.storage.message_finder import (
    entry_first_index,
    entry_last_index,
    find_by_index,
    find_first_at_or_after,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "magnetar.protocol_handlers"
_INDEX_INTERCEPTOR = "AppendIndexMetadataInterceptor"
# cursor properties ('#': magnetar's own, not the subscription's) of a handler's committed offset
_OFFSET_PROPERTY = "#committed.offset"
_OFFSET_METADATA_PROPERTY = "#committed.metadata"
_ID_COUNTER_PREFIX = "/protocol-handlers/id-counters/"

AppendCallback = Callable[[int | None, BaseException | None], None]
"""Gets the offset of the first message appended once every entry is durable, or None and the error."""


class ProtocolHandler(Protocol):
    """What the broker starts and stops; built with a `HandlerBroker`."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class PartitionLog:
    """One persistent topic partition as an offset-addressed log (offsets = PIP-70 indexes)."""

    def __init__(self, topic: PersistentTopic, hints: dict[object, tuple[int, Position]]) -> None:
        self._topic = topic
        # per partition name: (offset, position) where the last read ended, so a consumer reading
        # on skips find_by_index's binary search (a ledger read a step); under ("start", name)
        # and ("end", name) the first and last entries' positions with the offsets they give, so
        # no fetch reads either entry again until it changes
        self._hints = hints

    @property
    def name(self) -> str:
        return str(self._topic.name)

    def append(self, entries: list[bytes], counts: list[int], done: AppendCallback) -> None:
        """Store entries (without broker-entry metadata: the broker stamps it) as one group."""
        topic = self._topic
        if topic.terminated:
            raise BrokerServiceError(pb.TopicTerminatedError, f"{topic.name} is terminated")
        if encryption_required(topic):  # a handler's records are never encrypted as Pulsar's clients encrypt
            raise BrokerServiceError(pb.MetadataError, "Messages must be encrypted")
        first = topic.entry_metadata_state.index + 1  # stamping numbers the group's messages from here
        topic.publish_many(entries, counts, counts[-1], lambda _positions, exc: done(
            None if exc is not None else first, exc))

    def end_offset(self) -> int:
        """The offset the next message will get, as far as durable entries tell (Kafka's high watermark)."""
        ledger = self._topic.ledger
        last = ledger.last_confirmed_position
        if last is None:
            return self._topic.entry_metadata_state.index + 1
        known = self._hints.get(("end", self.name))
        if known is not None and known[1] == last:
            return known[0]
        end = entry_last_index(ledger.read_entry(last)) + 1
        self._hints[("end", self.name)] = (end, last)  # an idle partition's long polls read nothing
        return end

    def start_offset(self) -> int:
        """The offset of the first message still stored."""
        ledger = self._topic.ledger
        first = ledger.first_position
        if first is None or not ledger.has_entry(first):
            return self.end_offset()
        known = self._hints.get(("start", self.name))
        if known is not None and known[1] == first:
            return known[0]
        start = entry_first_index(ledger.read_entry(first))
        self._hints[("start", self.name)] = (start, first)  # the first entry changes only when trimmed
        return start

    def read(self, offset: int, max_bytes: int, max_entries: int = 500) -> list[bytes]:
        """Stored entries from the one holding `offset` on, at most `max_bytes` (but at least one)."""
        ledger = self._topic.ledger
        hint = self._hints.get(self.name)
        if hint is not None and hint[0] == offset and ledger.has_entry(hint[1]):
            position: Position | None = hint[1]
        else:
            position = find_by_index(ledger, offset).position
        if position is None:
            return []
        read = ledger.read_entries(position, max_entries, max_bytes)
        if read:
            last_position, last_entry = read[-1]
            self._hints[self.name] = (entry_last_index(bytes(last_entry)) + 1, ledger.next_position(last_position))
        return [bytes(entry) for _, entry in read]

    def offset_for_time(self, timestamp: int) -> int | None:
        """The first offset of the first entry stored at or after `timestamp` (broker time), None past the end."""
        ledger = self._topic.ledger
        position = find_first_at_or_after(ledger, timestamp).position
        if position is None:
            return None
        return entry_first_index(ledger.read_entry(position))

    def commit_offset(self, subscription: str, offset: int, metadata: str | None) -> None:
        """Durably record `offset` (the next to read) as `subscription`'s position, created if need be.

        The cursor moves to the entry holding `offset`, so the subscription's backlog (admin
        stats, retention) counts what the handler's client has not committed; the exact
        offset and its metadata are cursor properties. A handler's commit may move back."""
        topic = self._topic
        found = find_by_index(topic.ledger, offset).position
        position = found if found is not None else topic.next_publish_position()
        subscription_ = topic.subscriptions.get(subscription)
        if subscription_ is None:
            topic.create_subscription_at(subscription, position)
            subscription_ = topic.subscription(subscription)
        else:
            subscription_.cursor.reset(topic.entry_at_or_after(position))
        cursor = subscription_.cursor
        cursor.set_property(_OFFSET_PROPERTY, str(offset))
        cursor.set_property(_OFFSET_METADATA_PROPERTY, metadata or "")
        cursor.flush()

    def committed_offset(self, subscription: str) -> tuple[int, str] | None:
        """(offset, metadata) last committed for `subscription`, None if it never committed."""
        subscription_ = self._topic.subscriptions.get(subscription)
        if subscription_ is None:
            return None
        properties = subscription_.cursor.properties
        if _OFFSET_PROPERTY not in properties:
            return None
        return int(properties[_OFFSET_PROPERTY]), properties.get(_OFFSET_METADATA_PROPERTY, "")

    def property(self, key: str) -> str | None:
        """A property the handler set on this partition's ledger (its own state, e.g. a snapshot)."""
        return self._topic.ledger.get_property(key)

    def set_property(self, key: str, value: str) -> None:
        """Durable at once (a metadata-store write): for state saved now and then, not per append."""
        self._topic.ledger.set_property(key, value)

    def on_append(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after each durable append, whoever published; returns the way to stop."""
        listeners = self._topic.append_listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None


class HandlerBroker:
    """The broker as a protocol handler sees it."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._read_hints: dict[object, tuple[int, Position]] = {}

    @property
    def config(self) -> ServiceConfiguration:
        return self._service.config

    @property
    def authentication(self) -> AuthenticationService:
        """The providers the binary protocol authenticates with (authenticationProviders)."""
        return self._service.authentication

    def authorize(self, operation: Operation, role: str | None, scope: str) -> None:
        """AuthorizationError unless `role` may perform `operation` on `scope` (a topic, or a
        namespace `tenant/ns`), decided by the broker's AuthorizationService as for Pulsar
        clients; nothing when authorization is off. ResourceNotFoundError for a topic of a
        tenant that does not exist."""
        authorization = self._service.authorization
        if not authorization.enabled:  # what check() answers first, without parsing the name per request
            return
        resource = (Resource.of_topic(self._service.parse_topic(scope)) if "://" in scope
                    else Resource.of_namespace(scope))
        authorization.check(operation, role, resource)

    def ssl_context(self) -> ssl.SSLContext:
        """The broker's TLS server context (reloaded with its certificates) when it has a TLS
        port, else one built from the same tls* keys; ConfigError names a bad key."""
        if self._service.ssl_context is not None:
            return self._service.ssl_context
        try:
            return server_context(self.config)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None

    def reserve_ids(self, name: str, count: int) -> range:
        """`count` ids of the sequence `name` that no start of this broker's data handed out
        before: a counter in the metadata store moved past them before they are used."""
        end = bump_counter(self._service.metadata, _ID_COUNTER_PREFIX + name, count)
        return range(end - count, end)

    def partitions(self, topic: str) -> int | None:
        """The partition count, 0 for an existing non-partitioned topic, None for no topic."""
        name = self._service.parse_topic(topic)
        count = self._service.partitions_of(name)
        if count is not None:
            return count
        return 0 if self._service.topic_exists(name) else None

    def create_topic(self, topic: str, partitions: int) -> None:
        self._service.create_partitioned_topic(self._service.parse_topic(topic), partitions)

    def delete_topic(self, topic: str) -> None:
        name = self._service.parse_topic(topic)
        if self._service.partitions_of(name) is not None:
            self._service.delete_partitioned_topic(name, force=True)
        else:
            self._service.delete_topic(name, force=True)

    def topics(self, namespace: str) -> list[str]:
        """Persistent topics of a namespace, partitions named by their partitioned topic once."""
        names = {str(TopicName.parse(t).partitioned_topic_name) for t in self._service.topics_of_namespace(namespace)}
        return sorted(names)

    def partition_log(self, topic: str) -> PartitionLog:
        """The log of `topic` (a full name), loaded if need be."""
        loaded = self._service.get_topic(topic)
        if not isinstance(loaded, PersistentTopic):
            raise BrokerServiceError(pb.NotAllowedError, f"{topic} is not persistent")
        return PartitionLog(loaded, self._read_hints)


def load_protocol_handlers(service: BrokerService) -> list[ProtocolHandler]:
    """The handlers `messagingProtocols` names, built; a ConfigError names a missing one."""
    config = service.config
    if not config.messagingProtocols:
        return []
    if not any(name.endswith(_INDEX_INTERCEPTOR) for name in config.brokerEntryMetadataInterceptors):
        raise ConfigError(f"messagingProtocols={','.join(config.messagingProtocols)} needs PIP-70 offsets: add "
                          f"{_INDEX_INTERCEPTOR} to brokerEntryMetadataInterceptors")
    available = {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}
    handlers = []
    for name in config.messagingProtocols:
        if name not in available:
            raise ConfigError(f"messagingProtocols: no protocol handler {name!r} (installed: "
                              f"{', '.join(sorted(available)) or 'none'}; handlers register under the "
                              f"{ENTRY_POINT_GROUP!r} entry-point group)")
        handlers.append(available[name].load()(HandlerBroker(service)))
        log.info("protocol handler %s loaded", name)
    return handlers
