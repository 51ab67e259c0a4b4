"""Writing rows to topics: `df.write.format("magnetar")` and `df.writeStream.format("magnetar")`.

Each Spark task publishes its rows through `magnetar.client` producers, one per topic
partition it writes to, and routes keyed rows as the official Python client does
(`boost_string_hash(key) % partitions`), so a key lands where that client puts it.

Batch writes are at least once: a retried task sends its rows again.

Streaming writes are exactly once on a topic with deduplication on. A task's producer name
is `spark-<query id>-<partition id>` and each row's sequence id is
`(batch id << 32) + its position in the task's rows`, so the ids only grow along the query
(one producer name per query partition, not one per micro-batch, keeps the broker's
deduplication state bounded). A retried task, or a restarted query replaying a micro-batch
from its checkpoint, sends the same rows under the same name with the same ids, and the
broker drops those it stored before. For that to hold the entries must be cut the same way
each time, so a stream never cuts a batch on a timer: a Pulsar batch ends at
`batchingMaxMessages` / `batchingMaxBytes` or at the task's end, an Arrow entry covers a
fixed block of row positions, and unkeyed rows go to partitions by position, not at random.
As with any idempotent sink, a replayed micro-batch must hold the same rows in the same
order in each partition (true of a deterministic source such as magnetar's own).

With `.option("exactlyOnce", "true")`, batch writes and streams are exactly once on any topic,
deduplication or not: each task sends its rows in a transaction of its own and leaves it
open, and Spark's commit or abort of the batch ends them all (magnetar.spark.sink_transactions).
Producers then have no name or sequence ids of the sink's: an aborted attempt's ids must not
make the broker drop the replay's rows as duplicates.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from magnetar.client import Client, Producer, Result, errors
from magnetar.client.aio.routing import boost_string_hash
from magnetar.client.blocking import Transaction
from magnetar.client.schema import Schema
from magnetar.schemas import SchemaData
from magnetar.spark.option_errors import fail
from magnetar.spark.sink_transactions import (
    MagnetarCommitMessage,
    abort_batch,
    announce_opened,
    commit_batch,
    sink_client,
)
from magnetar.spark.value_encoding import ValueEncoder
from magnetar.spark.write_options import WriteOptions

ROW_SEQUENCE_BITS = 32
"""Row positions within one task of one micro-batch stay below 2**32."""
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
STREAM_BATCH_DELAY_MS = 24 * 3600 * 1000
"""Streams cut batches by size only (see the module docstring): the timer never fires first."""
ARROW_IN_FLIGHT = 16


@dataclass(frozen=True, slots=True)
class Identity:
    """Who writes a stream task's rows: the producer name and the first row's sequence id."""

    producer_name: str
    first_sequence_id: int
    query_id: str


def stream_identity(context: Any) -> Identity:
    """The task's identity from the local properties Spark's micro-batch execution sets."""
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_id is None:
        raise RuntimeError("the magnetar stream sink runs in micro-batch queries only (no query or batch id)")
    return Identity(f"spark-{query_id}-{context.partitionId()}", int(batch_id) << ROW_SEQUENCE_BITS, query_id)


class _Outcome:
    """The first failed send of a task, reported by a callback shared by all its messages."""

    def __init__(self) -> None:
        self.failure: Result | None = None

    def __call__(self, result: Result, message_id: object) -> None:
        if result != Result.Ok and self.failure is None:
            self.failure = result

    def check(self) -> None:
        if self.failure is not None:
            raise RuntimeError(f"magnetar sink: a message was not stored ({self.failure.name}); the task fails "
                               "so that Spark retries it")


class EncodedValues(Schema):
    """The producer's schema for payloads the sink encoded itself (a column at a time): it
    registers `schema` and passes the bytes through."""

    def __init__(self, schema: SchemaData) -> None:
        super().__init__(bytes, schema.type, schema.data, schema.type.name)

    def encode(self, obj: Any) -> bytes:
        return obj  # type: ignore[no-any-return]


class Destinations:
    """A task's producers, one per topic partition, created on first use."""

    def __init__(self, client: Client, options: WriteOptions, identity: Identity | None, seed: int,
                 txn: Transaction | None = None) -> None:
        self.client = client
        self.options = options
        self.identity = identity
        self.seed = seed
        self.txn = txn
        """The task's transaction (exactlyOnce): every message is sent in it."""
        self._partitions: dict[str, list[str]] = {}
        self._producers: dict[str, Producer] = {}

    def partitions(self, topic: str) -> list[str]:
        names = self._partitions.get(topic)
        if names is None:
            names = self._partitions[topic] = self.client.get_topic_partitions(topic)
        return names

    def route(self, topic: str, key: str | None, position: int) -> str:
        """The partition a row goes to: by key as the official client routes, else by position
        in blocks of a batch (deterministic, so a replay sends each row where it went before)."""
        names = self.partitions(topic)
        if len(names) == 1:
            return names[0]
        if key:
            return names[boost_string_hash(key) % len(names)]
        return names[(self.seed + position // self.options.batching_max_messages) % len(names)]

    def producer(self, partition: str) -> Producer:
        producer = self._producers.get(partition)
        if producer is None:
            producer = self._producers[partition] = self._create(partition)
        return producer

    def _create(self, partition: str) -> Producer:
        o = self.options
        try:
            return self._producer(partition, o)
        except errors.IncompatibleSchema as exc:
            kind = o.value_schema.type.name if o.value_schema is not None else "no"
            raise RuntimeError(f"magnetar sink: {partition} refused the {kind} schema of the 'value' column: "
                               f"IncompatibleSchema: {exc}") from None

    def _producer(self, partition: str, o: WriteOptions) -> Producer:
        return self.client.create_producer(
            partition,
            schema=None if o.value_schema is None else EncodedValues(o.value_schema),
            producer_name=self.identity.producer_name if self.identity else None,
            batching_enabled=True,
            batching_max_messages=o.batching_max_messages,
            batching_max_allowed_size_in_bytes=o.batching_max_bytes,
            batching_max_publish_delay_ms=STREAM_BATCH_DELAY_MS if self.identity else 10,
            compression_type=o.compression,
            batched_filter_properties=o.batched_filter_properties,
            block_if_queue_full=True,
            max_pending_messages=max(10_000, 4 * o.batching_max_messages),
        )

    def close(self) -> None:
        """Flush every producer (all rows stored, or the task fails), then close them."""
        try:
            for producer in self._producers.values():
                producer.flush()
        finally:
            for producer in self._producers.values():
                producer.close()


def _millis(column: pa.Array) -> list[int | None]:
    """Spark's microsecond timestamps as the epoch milliseconds Pulsar's metadata holds."""
    micros = pc.cast(column, pa.int64())
    return pc.divide(micros, 1000).to_pylist()


def _topics(batch: pa.RecordBatch, options: WriteOptions) -> list[str | None] | None:
    """Each row's topic from the column, where the option does not name one for all."""
    if options.topic is not None or "topic" not in batch.schema.names:
        return None
    return batch.column("topic").to_pylist()


def _row_topic(topics: list[str | None] | None, i: int, options: WriteOptions) -> str:
    if topics is None:
        assert options.topic is not None
        return options.topic
    topic = topics[i]
    if not topic:
        raise ValueError("magnetar sink: a row has a null 'topic' and no 'topic' option is set")
    return topic


def write_messages(batches: Iterable[pa.RecordBatch], dest: Destinations) -> int:
    """Publish every row as a message (batched by the producers); return the row count."""
    options = dest.options
    outcome = _Outcome()
    base = dest.identity.first_sequence_id if dest.identity else None
    position = 0
    encoder = ValueEncoder(options.value_schema)
    for batch in batches:
        names = batch.schema.names
        values = encoder.column(batch.column("value")).to_pylist()
        keys = batch.column("key").to_pylist() if "key" in names else None
        properties = batch.column("properties").to_pylist() if "properties" in names else None
        event_times = _millis(batch.column("event_time")) if "event_time" in names else None
        deliver_ats = _millis(batch.column("deliver_at")) if "deliver_at" in names else None
        topics = _topics(batch, options)
        for i, value in enumerate(values):
            kwargs: dict[str, Any] = {}
            key = keys[i] if keys is not None else None
            if key is not None:
                kwargs["partition_key"] = key
            if properties is not None and properties[i]:
                kwargs["properties"] = dict(properties[i])
            if event_times is not None and event_times[i]:
                kwargs["event_timestamp"] = event_times[i]
            if deliver_ats is not None and deliver_ats[i] is not None:
                kwargs["deliver_at"] = deliver_ats[i]
            if base is not None:
                kwargs["sequence_id"] = base + position
            if dest.txn is not None:
                kwargs["txn"] = dest.txn
            partition = dest.route(_row_topic(topics, i, options), key, position)
            dest.producer(partition).send_async(value, outcome, **kwargs)
            position += 1
        outcome.check()
    dest.close()  # flush() covers a transaction's messages too: all answered before the driver commits
    outcome.check()
    return position


class _ArrowSender:
    """Arrow entries in flight (at most ARROW_IN_FLIGHT), each one block of rows for one partition."""

    def __init__(self, dest: Destinations) -> None:
        self.dest = dest
        self.base = dest.identity.first_sequence_id if dest.identity else None
        self.in_flight: deque[concurrent.futures.Future[Any]] = deque()

    def send_block(self, block: pa.Table, position: int) -> None:
        """One entry per partition the block's rows go to, numbered from the block's first row."""
        dest, options = self.dest, self.dest.options
        keys = block.column("key").to_pylist() if "key" in block.schema.names else [None] * block.num_rows
        topics = block.column("topic").to_pylist() if options.topic is None else None
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            partition = dest.route(_row_topic(topics, i, options), key, position + i)
            groups.setdefault(partition, []).append(i)
        entries = block.drop_columns(["topic"]) if "topic" in block.column_names else block
        for partition, rows in groups.items():
            part = entries if len(rows) == block.num_rows else entries.take(pa.array(rows, pa.int64()))
            sequence_id = None if self.base is None else self.base + position
            self._wait(ARROW_IN_FLIGHT - 1)
            self.in_flight.append(dest.producer(partition).send_arrow_async(part, None, sequence_id))

    def _wait(self, keep: int) -> None:
        while len(self.in_flight) > keep:
            self.in_flight.popleft().result()

    def finish(self) -> None:
        self._wait(0)
        self.dest.close()


def write_arrow_entries(batches: Iterable[pa.RecordBatch], dest: Destinations) -> int:
    """Publish the rows as Arrow entries of `batchingMaxMessages` row positions each."""
    size = dest.options.batching_max_messages
    sender = _ArrowSender(dest)
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    position = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        pending_rows += batch.num_rows
        if pending_rows < size:
            continue
        table = pa.Table.from_batches(pending)
        while pending_rows >= size:
            sender.send_block(table.slice(0, size), position)
            table = table.slice(size)
            position += size
            pending_rows -= size
        pending = table.to_batches()
    if pending_rows:
        sender.send_block(pa.Table.from_batches(pending), position)
        position += pending_rows
    sender.finish()
    return position


def write_task(options: WriteOptions, batches: Iterator[pa.RecordBatch], identity: Identity | None) -> int:
    """One Spark task's rows, published; returns how many."""
    context = TaskContext.get()
    seed = context.partitionId() if context is not None else 0
    client = sink_client(options)
    try:
        dest = Destinations(client, options, identity, seed)
        if options.entry_format == "arrow":
            return write_arrow_entries(batches, dest)
        return write_messages(batches, dest)
    finally:
        client.close()


def write_task_in_txn(options: WriteOptions, batches: Iterator[pa.RecordBatch], query_id: str | None
                      ) -> MagnetarCommitMessage:
    """One task's rows in a transaction left open for the driver to end; aborted here if the
    task fails, so that a failed attempt holds back nobody's reading until it times out."""
    context = TaskContext.get()
    seed = context.partitionId() if context is not None else 0
    client = sink_client(options)
    try:
        deadline = time.time() + options.transaction_timeout_seconds
        txn = client.new_transaction(options.transaction_timeout_seconds)
        if query_id is not None:
            announce_opened(client, options, query_id, txn.txn_id)
        try:
            rows = write_messages(batches, Destinations(client, options, None, seed, txn))
        except BaseException:
            with contextlib.suppress(Exception):  # by id: waits for no send still in flight
                client.resume_transaction(txn.txn_id).abort()
            raise
        return MagnetarCommitMessage(rows, None, txn.txn_id, query_id, deadline)
    finally:
        client.close()


class MagnetarBatchWriter(DataSourceArrowWriter):
    """`df.write.format("magnetar")`: at least once (a retried task sends its rows again), or
    exactly once with the exactlyOnce option (the job's commit commits its tasks' transactions)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MagnetarCommitMessage:
        if self.options.exactly_once:
            return write_task_in_txn(self.options, iterator, None)
        return MagnetarCommitMessage(write_task(self.options, iterator, None), None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_batch(self.options, messages, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_batch(self.options, messages)


class MagnetarStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("magnetar")`: exactly once on a topic with deduplication on, or
    on any topic with the exactlyOnce option (transactions ended by Spark's commit or abort)."""

    def __init__(self, options: WriteOptions) -> None:
        if options.exactly_once and options.commit_namespace is None:
            fail("option 'exactlyOnce' with a 'topic' column needs 'commitNamespace': the tenant/namespace "
                 "where the stream records its committed micro-batches")
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MagnetarCommitMessage:
        identity = stream_identity(TaskContext.get())
        if self.options.exactly_once:
            return write_task_in_txn(self.options, iterator, identity.query_id)
        return MagnetarCommitMessage(write_task(self.options, iterator, identity), identity.producer_name)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Without exactlyOnce nothing to do: every row is stored once its task succeeds."""
        commit_batch(self.options, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Without exactlyOnce nothing to undo: a replay of the micro-batch is deduplicated by the broker."""
        abort_batch(self.options, messages)

