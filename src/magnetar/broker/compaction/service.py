"""The compaction service of a topic: Pulsar's TopicCompactionService, in Python.

A service compacts its topic up to a horizon and answers what compacted readers need:
the compacted entries, the last position it covers, the last message a compacted reader
can receive (from MessageMetadata only, PIP-429) and a position for a publish time.

Services are plugins: `compactionServiceFactoryClassName` names an entry point of the
group `magnetar.compaction_services` or a `package.module:Class`; Pulsar's default class
name, `builtin` and an empty value all mean the built-in service below, which works
without entry-point metadata installed. A factory is called as
`factory(ledger, storage_factory, options)`.

The two-phase compactor (compactor.py, with the batch and compression codecs it needs)
is imported when a topic is first compacted or a compacted topic's last message is
first asked for: every topic has a service, few are ever compacted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from magnetar.broker.compaction.options import CompactionOptions, CompactionResult, Progress, TransactionView
from magnetar.plugins import PluginGroup
from magnetar.storage import CorruptEntryError, ManagedLedger, ManagedLedgerFactory, Position, StorageClosedError
from magnetar.storage.compacted_ledger import CompactedLedger, CompactedLedgerStore, StagedLedgerError
from magnetar.storage.message_finder import entry_timestamp
from magnetar.wire.entry import parse_entry, parse_message_metadata

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "magnetar.compaction_services"
PULSAR_DEFAULT_FACTORY = "org.apache.pulsar.compaction.PulsarCompactionServiceFactory"
_BUILTIN = "magnetar.broker.compaction.service:BuiltinCompactionService"
_SERVICES = PluginGroup("compaction service", ENTRY_POINT_GROUP,
                        {"": _BUILTIN, "builtin": _BUILTIN, PULSAR_DEFAULT_FACTORY: _BUILTIN})
_READ_GROUP = 256


@dataclass(frozen=True, slots=True)
class MessagePosition:
    """Where the last retained message is: Pulsar's MessagePosition."""

    ledger_id: int
    entry_id: int
    batch_index: int
    publish_time: int


EARLIEST = MessagePosition(-1, -1, -1, 0)


class AdoptionRefused(ValueError):
    """A staged compaction that does not fit the topic (bad horizon, incomplete files)."""


class AdoptionConflict(AdoptionRefused):
    """The topic's compaction changed since the staged one was computed."""


@runtime_checkable
class TopicCompactionService(Protocol):
    def compact(self, progress: Progress | None = None) -> CompactionResult | None:
        """Compact up to the topic's current end (blocking: call it on a worker thread);
        None when there was nothing new to compact."""

    def read_compacted_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        """Compacted entries whose original position is >= `start`."""

    def last_compacted_position(self) -> Position | None:
        """The horizon of the compaction in force, None when the topic was never compacted."""

    def last_message_position(self) -> MessagePosition:
        """The last message a compacted reader can receive, or EARLIEST."""

    def find_position_by_publish_time(self, timestamp: int) -> Position | None:
        """The first compacted entry published at or after `timestamp`, None if none is."""

    def close(self) -> None: ...


Factory = Callable[[ManagedLedger, ManagedLedgerFactory, CompactionOptions], TopicCompactionService]


class BuiltinCompactionService:
    """Two-phase compaction into a compacted ledger kept beside the topic's ledgers."""

    def __init__(self, ledger: ManagedLedger, factory: ManagedLedgerFactory, options: CompactionOptions) -> None:
        self.ledger = ledger
        self.options = options
        self.store = CompactedLedgerStore(factory, ledger.name)
        self.transactions: TransactionView | None = None
        """Set by a topic that holds transactions (PIP-31)."""
        self._last: MessagePosition | None = None
        self._closed = threading.Event()

    # -- compacting
    def compact(self, progress: Progress | None = None) -> CompactionResult | None:
        from magnetar.broker.compaction.compactor import compact  # noqa: PLC0415 (see the module's docstring)

        horizon = self.ledger.last_confirmed_position
        options = self.options
        transactions = self.transactions
        if transactions is not None:  # never past an open transaction, never an aborted message
            held = transactions.max_read_position
            if horizon is not None and held is not None and held <= horizon:
                horizon = self.ledger.previous_position(held)
            options = replace(options, hidden=transactions.hides)
        previous = self.store.current
        if horizon is None or horizon.entry_id < 0 or (previous is not None and previous.horizon >= horizon):
            return None
        total = (previous.entries if previous else 0) + self._entries_after(previous, horizon)
        writer = self.store.new_writer()
        try:
            result = compact(lambda start: self._source(previous, horizon, start), writer, horizon, options,
                             total, progress, self._closed.is_set)
            self.store.commit(writer, horizon)
        except BaseException:
            writer.abort()
            raise
        self._last = None
        log.info("%s compacted up to %s: %d entries (%d messages, %d keys) read, %d written", self.ledger.name,
                 horizon, result.entries_read, result.messages_read, result.keys, result.entries_written)
        return result

    def _entries_after(self, previous: CompactedLedger | None, horizon: Position) -> int:
        first = self.ledger.first_position
        if first is None:
            return 0
        start = self.ledger.next_position(previous.horizon) if previous else first
        return self.ledger.entries_between(max(start, first), horizon)

    def _source(self, previous: CompactedLedger | None, horizon: Position,
                start: Position | None) -> Iterator[tuple[Position, bytes]]:
        """The compacted view up to `horizon`, from `start`: the previous compacted ledger,
        then the topic after its horizon."""
        topic_start = self.ledger.first_position
        if previous is not None:
            index = previous.index_at_or_after(start) if start is not None else 0
            while index < previous.entries:
                run = previous.read(index, _READ_GROUP)
                yield from run
                index += len(run)
            topic_start = self.ledger.next_position(previous.horizon)
        if topic_start is None:
            return
        if start is not None and start > topic_start:
            topic_start = start
        yield from self._topic_entries(topic_start, horizon)

    def _topic_entries(self, start: Position, horizon: Position) -> Iterator[tuple[Position, bytes]]:
        position = start
        while position <= horizon:
            try:
                run = self.ledger.read_entries(position, _READ_GROUP)
            except CorruptEntryError:
                log.warning("%s: compaction skips corrupt entry at %s", self.ledger.name, position)
                position = self.ledger.next_position(self.ledger.position_at_or_after(position))
                continue
            if not run:
                return
            for entry_position, data in run:
                if entry_position > horizon:
                    return
                yield entry_position, data
            position = self.ledger.next_position(run[-1][0])

    def adopt(self, staging: str, horizon: Position, base: Position | None, entries: int) -> None:
        """Put in force a compaction computed elsewhere (the Spark job) and staged by it.

        `base` is the horizon of the compaction the job read its view from: if another
        compaction ran since, the staged ledger misses nothing but may resurrect what that
        one saw deleted, so it is refused. `horizon` must lie after `base` and within what
        the topic stores, so compacted readers continue exactly after it.
        """
        try:
            self.store.staging_directory(staging)
        except StagedLedgerError as exc:
            raise AdoptionRefused(str(exc)) from None
        current = self.store.current
        in_force = current.horizon if current is not None else None
        if in_force != base:
            raise AdoptionConflict(f"the topic was compacted up to {in_force} since the job read it (from {base})")
        last = self.ledger.last_confirmed_position
        if last is None or horizon > last:
            raise AdoptionRefused(f"horizon {horizon} is beyond the topic's last entry {last}")
        if base is not None and horizon <= base:
            raise AdoptionRefused(f"horizon {horizon} is not after the compaction in force ({base})")
        try:
            self.store.adopt(staging, horizon, entries)
        except StagedLedgerError as exc:
            raise AdoptionRefused(str(exc)) from None
        self._last = None

    # -- reading
    def _current(self) -> CompactedLedger | None:
        return self.store.current

    def read_compacted_entries(self, start: Position, max_entries: int) -> list[tuple[Position, bytes]]:
        for _attempt in range(2):  # a compaction may switch ledgers between lookup and read
            current = self._current()
            if current is None:
                return []
            try:
                return current.read(current.index_at_or_after(start), max_entries)
            except StorageClosedError:
                continue
        return []

    def last_compacted_position(self) -> Position | None:
        current = self._current()
        return current.horizon if current is not None else None

    def last_message_position(self) -> MessagePosition:
        """Read from MessageMetadata only; cached until the next compaction."""
        if self._last is None:
            self._last = self._compute_last()
        return self._last

    def _compute_last(self) -> MessagePosition:
        from magnetar.wire.compaction import last_retained_index  # noqa: PLC0415 (see the module's docstring)

        current = self._current()
        if current is None or current.entries == 0:
            return EARLIEST
        position, data = current.read(current.entries - 1, 1)[0]
        metadata = parse_message_metadata(data)
        index = last_retained_index(metadata, lambda: parse_entry(data).payload,
                                    max_size=self.options.max_message_size)
        return MessagePosition(position.ledger_id, position.entry_id, index, metadata.publish_time)

    def find_position_by_publish_time(self, timestamp: int) -> Position | None:
        """Binary search over the compacted entries' times (broker timestamp, else publish
        time), reading about log2(n) entries' prefixes or metadata."""
        current = self._current()
        if current is None:
            return None
        low, high = 0, current.entries
        while low < high:
            middle = (low + high) // 2
            _position, data = current.read(middle, 1)[0]
            if entry_timestamp(data) >= timestamp:
                high = middle
            else:
                low = middle + 1
        return current.positions[low] if low < current.entries else None

    def close(self) -> None:
        self._closed.set()
        self.store.close()


def load_compaction_service_factory(name: str) -> Factory:
    """The factory the operator's `name` designates (see the module docstring); ValueError
    if none. Only the broker's configuration names one."""
    factory = _SERVICES.load(name)
    if not callable(factory):
        raise ValueError(f"compaction service {name!r} is not callable")
    return factory  # type: ignore[no-any-return]
