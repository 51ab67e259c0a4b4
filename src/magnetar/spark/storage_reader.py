"""Reading topics straight from a broker's data directory (the `path` option).

Like Pulsar SQL reading bookies: no broker in the way, and it works beside a live broker,
because a read-only `ManagedLedgerFactory` takes no lock and sees only durable whole entries.
The driver turns bounds (offsets, times, pushed filters) into entry ranges with the
prefix-only binary searches of `message_finder`, then splits big ranges so that every core
gets work; executors read their range and turn entries into Arrow batches.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa

from magnetar.broker.transactions import TRANSACTIONS_PROPERTY
from magnetar.broker.transactions.buffer import TransactionBuffer, hidden
from magnetar.formats.processor import all_builtins
from magnetar.spark.decryption import Decryption
from magnetar.spark.offsets import EARLIEST_INDEX, LATEST_INDEX, TopicPartition
from magnetar.spark.options import MagnetarOptionError, SourceOptions
from magnetar.spark.rows import RowFilter, rows_of_entries
from magnetar.spark.worker_heap import gc_paused
from magnetar.storage import ManagedLedger, ManagedLedgerFactory, MetadataStore, NoSuchManagedLedgerError, Position
from magnetar.storage.ledger import Allocator
from magnetar.storage.message_finder import EntrySequence, find_by_index, find_first_at_or_after
from magnetar.wire.entry import first_message_index, parse_message_metadata, peek_broker_entry_metadata
from magnetar.wire.topic_name import TopicName
from magnetar.wire.txn import TxnId

PARTITIONED_PREFIX = "/admin/partitioned-topics/"
ROWS_PER_BATCH = 65536
ENTRIES_PER_READ = 512
BYTES_PER_READ = 8 * 1024 * 1024


class MagnetarDataLossError(RuntimeError):
    """Offsets point at messages no longer stored (and failOnDataLoss is true)."""


_factories: dict[str, ManagedLedgerFactory] = {}
_factories_lock = threading.Lock()


def open_data_dir(path: str) -> ManagedLedgerFactory:
    """One read-only factory per data dir and process: Spark reuses Python workers, so
    later tasks skip reopening the metadata store and ledger files."""
    key = str(Path(path).resolve())
    with _factories_lock:
        factory = _factories.get(key)
        if factory is None:
            if not (Path(key) / "metadata.db").exists():
                raise MagnetarOptionError(f"option 'path': {path!r} is not a magnetar data directory (no metadata.db)")
            factory = _factories[key] = ManagedLedgerFactory(Path(key), read_only=True)
        return factory


@dataclass(frozen=True, slots=True)
class Bounds:
    """What to read of one topic partition.

    index_* and time_* (broker_time filters) are searched for and then applied to each row;
    entry_time_* (startingTime/endingTime) are entry-level, searched with the finder's rule
    (broker time, else publish time) and not re-checked per row.
    """

    index_min: int | None = None
    index_max: int | None = None
    time_min: int | None = None
    time_max: int | None = None
    entry_time_min: int | None = None
    entry_time_end: int | None = None
    properties: tuple[tuple[str, str], ...] = ()

    def row_filter(self) -> RowFilter:
        return RowFilter(self.index_min, self.index_max, self.time_min, self.time_max, self.properties)

    @property
    def on_entry_metadata(self) -> bool:
        """Whether these bounds are on PIP-70's index or broker time, which entries without the
        prefix lack (their rows never match)."""
        return any(v is not None for v in (self.index_min, self.index_max, self.time_min, self.time_max))


@dataclass(frozen=True, slots=True)
class EntryRange:
    """A Spark partition's share: `entries` entries of one topic partition from a position."""

    tp: TopicPartition
    storage_name: str
    ledger_id: int
    entry_id: int
    entries: int
    row_filter: RowFilter
    aborted: frozenset[TxnId] | None = None
    """On a topic that holds transactions, the aborted ones, whose messages (and the markers)
    are not rows; None on any other topic, whose entries are not looked at for it."""


@dataclass(slots=True)
class Plan:
    ranges: list[EntryRange]
    entries_searched: int
    """Entries read by the binary searches (prefixes only) to find the ranges."""

    @property
    def entries_to_read(self) -> int:
        return sum(r.entries for r in self.ranges)


def storage_name(tp: TopicPartition) -> str:
    return TopicName.parse(tp.storage_topic).storage_name


def first_index(entry: bytes) -> int | None:
    """The PIP-70 index of the entry's first message (None without the prefix)."""
    last = last_index(entry)
    return None if last is None else first_message_index(parse_message_metadata(entry), last)


def last_index(entry: bytes) -> int | None:
    bem = peek_broker_entry_metadata(entry)
    return bem.index if bem is not None and bem.HasField("index") else None


_ENTRY_METADATA_COLUMNS = (("index", "index"), ("broker_time", "broker_timestamp"))


def missing_entry_metadata(entry: bytes) -> list[str]:
    """The PIP-70 columns an entry leaves null: `index` and `broker_time` without the prefix,
    one of them when only one interceptor stamped it."""
    bem = peek_broker_entry_metadata(entry)
    return [column for column, name in _ENTRY_METADATA_COLUMNS if bem is None or not bem.HasField(name)]


class StorageTopics:
    """The driver's view of a data dir: which topic partitions exist, and their entry ranges."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.factory = open_data_dir(path)

    def _partitions_of(self, topic: TopicName) -> int | None:
        raw = self.factory.metadata_store.get(PARTITIONED_PREFIX + topic.storage_name)
        return json.loads(raw)["partitions"] if raw else None

    def _all_topics(self) -> set[str]:
        names: set[str] = set()
        store = self.factory.metadata_store
        for key in store.list(PARTITIONED_PREFIX):
            tenant, ns, domain, local = key[len(PARTITIONED_PREFIX) :].split("/", 3)
            names.add(f"{domain}://{tenant}/{ns}/{local}")
        for name in self.factory.list_names():
            tenant, ns, domain, local = name.split("/", 3)
            topic = TopicName(domain, tenant, ns, local)
            parent = topic.partitioned_topic_name
            if topic.partition_index >= 0 and str(parent) in names:
                continue
            names.add(str(topic))
        return names

    def resolve(self, options: SourceOptions) -> list[TopicPartition]:
        """The topic partitions to read; an unknown topic is an error naming it."""
        if options.topics_pattern is not None:
            pattern = re.compile(options.topics_pattern)
            topics = sorted(t for t in self._all_topics() if pattern.fullmatch(t))
        else:
            topics = list(options.topics)
        out: list[TopicPartition] = []
        for name in topics:
            out.extend(self.partitions(name, strict=options.topics_pattern is None))
        return out

    def partitions(self, name: str, strict: bool = True) -> list[TopicPartition]:
        """The stored partitions of one topic (itself if not partitioned); an unknown topic
        is an error naming it when `strict`, else nothing."""
        topic = TopicName.parse(name)
        partitions = self._partitions_of(topic)
        if partitions is not None:
            return [TopicPartition(str(topic), i) for i in range(partitions)]
        if self.factory.exists(topic.storage_name):
            parent = topic.partitioned_topic_name
            if topic.partition_index >= 0 and self._partitions_of(parent) is not None:
                return [TopicPartition(str(parent), topic.partition_index)]
            return [TopicPartition(str(topic), -1)]
        if strict:
            raise MagnetarOptionError(f"unknown topic {name}: no such topic in data directory {self.path}")
        return []

    def close(self) -> None:
        """Nothing to release: the data dir's factory is shared by the process's readers."""

    def ledger(self, tp: TopicPartition) -> ManagedLedger | None:
        """The partition's managed ledger, refreshed; None if it never stored anything."""
        try:
            ml = self.factory.open(storage_name(tp))
        except NoSuchManagedLedgerError:
            return None
        ml.refresh()
        return ml

    def _edge_entry(self, tp: TopicPartition, last: bool) -> bytes | None:
        ml = self.ledger(tp)
        if ml is None:
            return None
        position = ml.last_confirmed_position if last else ml.first_position
        return None if position is None else ml.read_entry(position)

    def has_entries(self, tp: TopicPartition) -> bool:
        ml = self.ledger(tp)
        return ml is not None and ml.last_confirmed_position is not None

    def edge_entries(self, tp: TopicPartition) -> list[bytes]:
        """The partition's first and last entries (none when empty)."""
        return [entry for last in (False, True) if (entry := self._edge_entry(tp, last)) is not None]

    def first_index(self, tp: TopicPartition) -> int | None:
        entry = self._edge_entry(tp, last=False)
        return None if entry is None else first_index(entry)

    def next_index(self, tp: TopicPartition) -> int | None:
        """The index the next message will get (None: empty, or the last entry has no index);
        on a topic with a transaction open, that of its first message: a stream goes no further."""
        ml = self.ledger(tp)
        transactions = transactions_of(ml, self.factory.metadata_store) if ml is not None else None
        if transactions is not None and transactions.max_read_position is not None:
            return first_index(ml.read_entry(transactions.max_read_position))  # type: ignore[union-attr]
        entry = self._edge_entry(tp, last=True)
        last = None if entry is None else last_index(entry)
        return None if last is None else last + 1

    def entry_at(self, tp: TopicPartition, ledger_id: int, entry_id: int) -> tuple[tuple[int, int], bytes] | None:
        """The entry at (ledger, entry), or the first after it, with its position (None: past the end)."""
        ml = self.ledger(tp)
        last = None if ml is None else ml.last_confirmed_position
        if ml is None or last is None:
            return None
        position = max(ml.position_at_or_after(Position(ledger_id, entry_id)), ml.first_position or last)
        if position > last:
            return None
        return (position.ledger_id, position.entry_id), ml.read_entry(position)

    def index_at_time(self, tp: TopicPartition, timestamp: int) -> int | None:
        """The index of the first message at or after `timestamp` (None: none yet)."""
        ml = self.ledger(tp)
        if ml is None:
            return None
        found = find_first_at_or_after(ml, timestamp).position
        return None if found is None else first_index(ml.read_entry(found))

    def plan(self, tp: TopicPartition, bounds: Bounds, split_bytes: int, fail_on_data_loss: bool) -> Plan:
        """Entry ranges holding every message within `bounds`, at most ~split_bytes each."""
        ml = self.ledger(tp)
        if ml is None:
            return Plan([], 0)
        entries = EntrySequence(ml)
        start, end, searched = 0, entries.size, 0
        transactions = transactions_of(ml, self.factory.metadata_store)
        if transactions is not None and transactions.max_read_position is not None:
            end = entries.ordinal(transactions.max_read_position)  # nothing from an open transaction on
        lower = [(find_by_index, bounds.index_min), (find_first_at_or_after, bounds.time_min)]
        lower.append((find_first_at_or_after, bounds.entry_time_min))
        for search, value in lower:
            if value is not None and start < end:
                result = search(ml, value)
                searched += result.entries_read
                start = max(start, entries.ordinal(result.position))
        if bounds.index_max is not None and start < end:
            result = find_by_index(ml, bounds.index_max)
            searched += result.entries_read
            end = min(end, entries.ordinal(result.position) + 1)
        upper = [(bounds.time_max + 1 if bounds.time_max is not None else None), bounds.entry_time_end]
        for value in upper:
            if value is not None and start < end:
                result = find_first_at_or_after(ml, value)
                searched += result.entries_read
                end = min(end, entries.ordinal(result.position))
        if bounds.index_min is not None and entries.size and fail_on_data_loss:
            first = first_index(entries.read(0))
            searched += 1
            if first is not None and bounds.index_min < first:
                raise MagnetarDataLossError(
                    f"{tp.storage_topic}: index {bounds.index_min} is no longer stored (the first is {first}); "
                    "set failOnDataLoss=false to start from the first stored message"
                )
        if start >= end:
            return Plan([], searched)
        per_split = max(1, split_bytes * entries.size // max(1, ml.total_size_bytes()))
        name = storage_name(tp)
        row_filter = bounds.row_filter()
        aborted = frozenset(transactions.aborted) if transactions is not None else None
        ranges = []
        for first in range(start, end, per_split):
            position = entries.position(first)
            count = min(per_split, end - first)
            ranges.append(EntryRange(tp, name, position.ledger_id, position.entry_id, count, row_filter, aborted))
        return Plan(ranges, searched)


def transactions_of(ml: ManagedLedger, store: MetadataStore) -> TransactionBuffer | None:
    """What a topic that has held transactions lets readers see: the broker's last snapshot
    of its transaction buffer (in `store`, the data dir's metadata) and the entries after it,
    so a plan reads the metadata of the entries since the snapshot, not of the whole topic;
    None for any other topic."""
    if ml.get_property(TRANSACTIONS_PROPERTY) is None:
        return None
    return TransactionBuffer.load(ml, store)


def resolve_index(topics: StorageTopics, tp: TopicPartition, index: int) -> int | None:
    """-2/-1 (earliest/latest) as the partition's actual first/next index; None if unknown yet."""
    if index == EARLIEST_INDEX:
        return topics.first_index(tp)
    if index == LATEST_INDEX:
        return topics.next_index(tp)
    return index


def read_range(path: str, work: EntryRange, fail_on_data_loss: bool = True,
               payload_processors: Sequence[str] = (), extra_columns: Sequence[str] = (),
               decryption: Decryption | None = None) -> Iterator[pa.RecordBatch]:
    """Executor side: the rows of one entry range, as Arrow batches of ~ROWS_PER_BATCH rows
    (with `extra_columns` and `decryption`, see rows_of_entries)."""
    encrypted = (decryption or Decryption()).undecryptable()
    entries = entries_of_range(path, work, fail_on_data_loss, into=pa.allocate_buffer)
    with gc_paused():
        yield from rows_of_entries(entries, work.tp.topic, work.tp.partition, work.row_filter, ROWS_PER_BATCH,
                                   all_builtins(payload_processors), extra_columns, encrypted)


def entries_of_range(path: str, work: EntryRange, fail_on_data_loss: bool, into: Allocator | None = None
                     ) -> Iterator[tuple[int, int, bytes | memoryview]]:
    """The range's entries: bytes, or with `into` views of reads into buffers it gives (see
    Ledger.read_range). The row reader passes Arrow's memory pool, which keeps its memory
    between reads: fresh memory from malloc for every 8 MB read cost page faults (~6,000 per
    Spark partition), more than the read itself. Compaction keeps bytes: it may store them."""
    ml = open_data_dir(path).open(work.storage_name)
    ml.refresh()
    position = Position(work.ledger_id, work.entry_id)
    remaining = work.entries
    while remaining > 0:
        chunk = ml.read_entries(position, min(remaining, ENTRIES_PER_READ), BYTES_PER_READ, into)
        if not chunk:
            if fail_on_data_loss:
                raise MagnetarDataLossError(
                    f"{work.tp.storage_topic}: {remaining} entries from {position} are no longer stored"
                )
            return
        aborted = work.aborted
        for (ledger_id, entry_id), data in chunk:
            if aborted is None or not hidden(parse_message_metadata(data), aborted):
                yield ledger_id, entry_id, data
        remaining -= len(chunk)
        position = ml.next_position(chunk[-1][0])


def with_index_bounds(bounds: Bounds, low: int | None, high: int | None) -> Bounds:
    """`bounds` narrowed to indexes [low, high] (either may be None)."""
    return replace(
        bounds, index_min=tighter(max, bounds.index_min, low), index_max=tighter(min, bounds.index_max, high)
    )


def tighter(pick: Callable[[int, int], int], current: int | None, new: int | None) -> int | None:
    """Combine two optional bounds with `pick` (max for lower bounds, min for upper ones)."""
    if current is None:
        return new
    return current if new is None else pick(current, new)
