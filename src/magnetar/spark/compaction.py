"""`magnetar.spark.compact`: topic compaction (PIP-429's semantics) as a Spark job, for a
topic too big for one process.

The job reads the topic's *compacted view* from the broker's data directory, as the
broker's compactor does (the previous compacted ledger up to its horizon, then the topic
after it, up to the new horizon: the last entry when the job starts), cut into splits:

1. phase one, in parallel: each split's last message per key (deletes included); Spark
   merges them by key (the latest position wins) and drops the keys whose latest message
   deletes them;
2. phase two, in parallel: each split rewrites its entries holding retained messages with
   the compactor's own `compacted_entry` (kept, marked or rebatched byte for byte alike);
3. the driver writes them, in order, with the compacted ledger's own writer into a
   staging directory beside the topic's ledgers, which nothing reads;
4. adoption: with `service_url`, the broker owning the topic checks the staged ledger and
   the horizons (`POST .../compaction/adopt`) and switches to it in one metadata put; with
   only `path` (no broker running: the job takes the data directory's lock) the job does
   the same checks and switch itself. Either way a compaction that ran meanwhile makes the
   adoption fail rather than be overwritten, and the previous compacted ledger stays.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.admin_client import AdminClient, AdminError
from magnetar.broker.compaction.compactor import CompactionOptions
from magnetar.broker.compaction.manager import hold_trimming
from magnetar.broker.compaction.service import AdoptionRefused, BuiltinCompactionService
from magnetar.spark.compaction_tasks import (
    Retained,
    Split,
    compacted_split,
    last_messages,
    later,
)
from magnetar.spark.offsets import TopicPartition
from magnetar.spark.options import MagnetarOptionError
from magnetar.spark.storage_reader import StorageTopics, open_data_dir, storage_name, transactions_of
from magnetar.storage import DataDirLockedError, ManagedLedgerFactory, NoSuchManagedLedgerError, Position
from magnetar.storage.compacted_ledger import CompactedLedgerStore
from magnetar.storage.message_finder import EntrySequence

log = logging.getLogger(__name__)
Progress = Callable[[float], None]
#: Bytes of entries per split: big enough that a task outweighs its scheduling.
DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024


class SparkCompactionError(RuntimeError):
    """The job's compaction was not put in force (the reason says why); nothing changed."""


@dataclass(slots=True)
class SparkCompactionResult:
    """What one topic partition's run did; `horizon` None when there was nothing new."""

    topic: str
    horizon: Position | None
    base: Position | None
    entries_read: int = 0
    messages_read: int = 0
    entries_written: int = 0
    keys: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class PartitionPlan:
    tp: TopicPartition
    base: Position | None
    horizon: Position
    splits: list[Split] = field(default_factory=list)


def compact(spark: Any, topic: str, service_url: str | None = None, path: str | None = None, *,
            retain_null_key: bool | None = None, split_bytes: int = DEFAULT_SPLIT_BYTES,
            progress: Progress | None = None) -> list[SparkCompactionResult]:
    """Compact `topic` (each partition of a partitioned one) with `spark`.

    `path` is the broker's data directory, which the job reads (read-only, safe beside a
    running broker). `service_url` is that broker's HTTP admin URL: give it whenever the
    broker runs, so that it adopts the result; without it the job adopts the result itself
    and refuses to run against a data directory a broker holds. `retain_null_key` defaults
    to the broker's `topicCompactionRetainNullKey` (false without a broker).
    """
    if path is None:
        raise MagnetarOptionError("compact: pass path=<the broker's data directory> (the job reads the topic's "
                                  "ledgers there; service_url only names the broker that adopts the result)")
    admin = AdminClient(service_url) if service_url else None
    options = CompactionOptions(retain_null_key=_retain_null_key(admin, retain_null_key))
    partitions = StorageTopics(path).partitions(topic)
    results = []
    for number, tp in enumerate(partitions):
        def scaled(fraction: float, number: int = number) -> None:
            if progress is not None:
                progress((number + fraction) / len(partitions))

        results.append(_compact_partition(spark, path, tp, admin, options, split_bytes, scaled))
    if progress is not None:
        progress(1.0)
    return results


def _retain_null_key(admin: AdminClient | None, given: bool | None) -> bool:
    if given is not None:
        return given
    if admin is None:
        return False
    value = admin.runtime_configuration().get("topicCompactionRetainNullKey", "false")
    return str(value).lower() == "true"


def _compact_partition(spark: Any, path: str, tp: TopicPartition, admin: AdminClient | None,
                       options: CompactionOptions, split_bytes: int, progress: Progress) -> SparkCompactionResult:
    started = time.monotonic()
    plan = plan_partition(path, tp, split_bytes, spark.sparkContext.defaultParallelism)
    if plan is None:
        log.info("%s: nothing new to compact", tp.storage_topic)
        return SparkCompactionResult(tp.storage_topic, None, None)
    result = SparkCompactionResult(tp.storage_topic, plan.horizon, plan.base)
    store = CompactedLedgerStore(open_data_dir(path), storage_name(tp))
    staging = f"staging-spark-{uuid.uuid4().hex}"
    try:
        writer = store.staging_writer(staging)
        try:
            for ledger_id, entry_id, entry in _run(spark, path, plan, options, result, progress):
                writer.add(Position(ledger_id, entry_id), entry)
        except BaseException:
            writer.abort()
            raise
        writer.finish()
        result.entries_written = writer.entries
        _adopt(path, tp, admin, staging, plan, writer.entries, options)
    finally:
        store.remove_staging(staging)  # adopted: already moved away
        store.close()
    result.seconds = time.monotonic() - started
    log.info("%s compacted by Spark up to %s: %d entries (%d messages, %d keys) read, %d written in %.1fs",
             tp.storage_topic, plan.horizon, result.entries_read, result.messages_read, result.keys,
             result.entries_written, result.seconds)
    return result


def plan_partition(path: str, tp: TopicPartition, split_bytes: int, parallelism: int) -> PartitionPlan | None:
    """The compacted view of `tp` up to its last entry, in splits; None when the compaction
    in force already covers every entry."""
    factory = open_data_dir(path)
    name = storage_name(tp)
    try:
        ml = factory.open(name)
    except NoSuchManagedLedgerError:  # a partition that never stored anything
        return None
    ml.refresh()
    horizon = ml.last_confirmed_position
    transactions = transactions_of(ml, factory.metadata_store)
    aborted = None
    if transactions is not None:  # never past an open transaction, never an aborted message
        held = transactions.max_read_position
        if horizon is not None and held is not None and held <= horizon:
            horizon = ml.previous_position(held)
            if horizon.entry_id < 0:
                return None
        aborted = frozenset(transactions.aborted)
    store = CompactedLedgerStore(factory, name)
    try:
        previous = store.current
        base = previous.horizon if previous is not None else None
        if horizon is None or (base is not None and base >= horizon):
            return None
        plan = PartitionPlan(tp, base, horizon)
        if previous is not None and previous.entries:
            per_split = _per_split(previous.entries, previous.info.size, split_bytes, parallelism)
            for start in range(0, previous.entries, per_split):
                count = min(per_split, previous.entries - start)
                plan.splits.append(Split(True, tp, name, previous.info.ledger_id, start, count,
                                         tuple(previous.positions[start])))
    finally:
        store.close()
    entries = EntrySequence(ml)
    first = _ordinal_after(entries, base)
    end = entries.ordinal(horizon) + 1
    if first < end:
        per_split = _per_split(entries.size, ml.total_size_bytes(), split_bytes, parallelism)
        for start in range(first, end, per_split):
            position = entries.position(start)
            plan.splits.append(Split(False, tp, name, position.ledger_id, position.entry_id,
                                     min(per_split, end - start), tuple(position), aborted))
    return plan


def _ordinal_after(entries: EntrySequence, base: Position | None) -> int:
    """The ordinal of the first stored entry after `base` (all of them without one)."""
    if base is None or entries.size == 0:
        return 0
    ordinal = entries.ordinal(base)
    return ordinal + 1 if ordinal < entries.size and entries.position(ordinal) == base else ordinal


def _per_split(entries: int, size: int, split_bytes: int, parallelism: int) -> int:
    """Entries per split: about `split_bytes` each, but at least one split per core."""
    by_size = split_bytes * entries // max(1, size)
    return max(1, min(by_size, -(-entries // max(1, parallelism))))


def _run(spark: Any, path: str, plan: PartitionPlan, options: CompactionOptions, result: SparkCompactionResult,
         progress: Progress) -> Iterator[tuple[int, int, bytes]]:
    """Both phases; yields the compacted entries in order as Spark finishes them."""
    sc = spark.sparkContext
    splits = plan.splits
    firsts = [split.first for split in splits]
    entries_read, messages_read = sc.accumulator(0), sc.accumulator(0)

    def phase_one(items: Iterable[tuple[int, Split]]) -> Iterator[tuple[str, tuple[int, int, int, bool]]]:
        for _number, split in items:
            summary = last_messages(path, split, options)
            entries_read.add(summary.entries)
            messages_read.add(summary.messages)
            yield from summary.last.items()

    def owner(item: tuple[str, tuple[int, int, int, bool]]) -> tuple[int, Retained]:
        key, (ledger_id, entry_id, index, _deletes) = item
        return bisect.bisect_right(firsts, (ledger_id, entry_id)) - 1, (key, ledger_id, entry_id, index)

    def phase_two(number: int, items: Iterable[tuple[int, Retained]]) -> Iterator[tuple[int, int, bytes]]:
        return compacted_split(path, splits[number], (retained for _n, retained in items), options)

    count = len(splits)
    group = f"magnetar-compact-{uuid.uuid4().hex}"
    sc.setJobGroup(group, f"magnetar compaction of {plan.tp.storage_topic}")
    retained = (sc.parallelize(list(enumerate(splits)), count).mapPartitions(phase_one)
                .reduceByKey(later, count).filter(lambda item: not item[1][3]).cache())
    with _StageProgress(sc, group, 3 * count, progress):
        result.keys = retained.count()
        compacted = retained.map(owner).partitionBy(count, lambda number: number).mapPartitionsWithIndex(phase_two)
        yield from compacted.toLocalIterator(prefetchPartitions=True)
    retained.unpersist()
    result.entries_read, result.messages_read = entries_read.value, messages_read.value


class _StageProgress:
    """Reports the tasks finished in the job group (over `expected`) from a polling thread:
    Spark tells the driver nothing per task, but its status tracker counts them."""

    def __init__(self, sc: Any, group: str, expected: int, progress: Progress) -> None:
        self._sc, self._group, self._expected, self._progress = sc, group, max(1, expected), progress
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="compaction-progress", daemon=True)

    def __enter__(self) -> _StageProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        tracker = self._sc.statusTracker()
        while not self._stop.wait(0.25):
            done: dict[int, int] = {}
            for job in tracker.getJobIdsForGroup(self._group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info else ():
                    stage_info = tracker.getStageInfo(stage)
                    if stage_info is not None:
                        done[stage] = stage_info.numCompletedTasks
            self._progress(min(sum(done.values()) / self._expected, 0.99))


def _adopt(path: str, tp: TopicPartition, admin: AdminClient | None, staging: str, plan: PartitionPlan,
           entries: int, options: CompactionOptions) -> None:
    try:
        if admin is not None:
            admin.adopt_compaction(tp.storage_topic, staging, plan.horizon, plan.base, entries)
        else:
            _adopt_offline(path, tp, staging, plan, entries, options)
    except (AdminError, AdoptionRefused) as exc:
        reason = exc.reason if isinstance(exc, AdminError) else str(exc)
        raise SparkCompactionError(f"{tp.storage_topic}: the compaction was not adopted: {reason}") from None


def _adopt_offline(path: str, tp: TopicPartition, staging: str, plan: PartitionPlan, entries: int,
                   options: CompactionOptions) -> None:
    """No broker: take the data directory (so none starts meanwhile) and switch as it would."""
    try:
        factory = ManagedLedgerFactory(Path(path))
    except DataDirLockedError:
        raise SparkCompactionError(f"a broker holds the data directory {path}: pass service_url=<its admin URL> "
                                   "so that it adopts the compaction") from None
    try:
        ml = factory.open(storage_name(tp))
        service = BuiltinCompactionService(ml, factory, options)
        try:
            service.adopt(staging, plan.horizon, plan.base, entries)
            hold_trimming(ml, plan.horizon)
        finally:
            service.close()
    finally:
        factory.close()
