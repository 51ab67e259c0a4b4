"""The exactly-once sink (`.option("exactlyOnce", "true")`) on a broker with transactions and
no deduplication: a batch shows whole once Spark commits it, never when a task fails, and a
stream killed mid-batch, or replaying a micro-batch it had committed, stores each row once.

Outputs are read back with the official client and magnetar.client, both to the end
(`has_message_available`), so a duplicate would be counted."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pyarrow as pa
import pytest
from polling import wait_for
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType, StructField, StructType
from spark_helpers import official_client
from standalone import Standalone
from test_spark_write import _kill_spark_python_workers, _slowly

import magnetar.client
from magnetar.admin_client import AdminClient
from magnetar.spark.sink_transactions import commit_batch
from magnetar.spark.write_options import WriteOptions
from magnetar.spark.writer import write_task_in_txn

pytestmark = pytest.mark.spark

TXN_ON = "transactionCoordinatorEnabled=true"
CLIENTS = ["official", "magnetar"]
EXACTLY_ONCE = {"exactlyOnce": "true", "batchingMaxMessages": "25"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("exactly-once") / "data", [TXN_ON]).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def admin(broker: Standalone) -> AdminClient:
    return AdminClient(broker.admin_url)


def _client(kind: str, broker: Standalone):
    if kind == "official":
        return official_client(broker)
    return magnetar.client.Client(broker.url, operation_timeout_seconds=10)


def _read_to_end(kind: str, broker: Standalone, partitions: list[str]) -> list[bytes]:
    """Every message a reader gets from the start to the last one readable now, on each partition."""
    got: list[bytes] = []
    with _client(kind, broker) as client:
        for partition in partitions:
            reader = client.create_reader(partition, pulsar.MessageId.earliest if kind == "official"
                                          else magnetar.client.MessageId.earliest)
            while reader.has_message_available():
                got.append(reader.read_next(10_000).data())
            reader.close()
    return got


def _partitions(topic: str, count: int) -> list[str]:
    name = f"persistent://public/default/{topic}"
    return [f"{name}-partition-{i}" for i in range(count)] if count else [name]


def _write(df, broker: Standalone, options: dict[str, str]):
    writer = df.write.format("magnetar").option("service.url", broker.url)
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.mode("append").save()


@pytest.mark.parametrize("kind", CLIENTS)
def test_batch_write_shows_every_row_once_when_the_job_commits(spark, broker, admin, kind):
    topic = f"eo-batch-{kind}"
    admin.create_partitioned_topic(f"persistent://public/default/{topic}", 3)
    rows = 20_000
    # Two tasks of many rows made by Spark at once: a good part of a task's sends are still
    # in flight when its rows run out, and must all be answered before its producers close.
    df = spark.range(rows, numPartitions=2).select(
        F.concat(F.lit(f"{topic}-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.when(F.col("id") % 3 > 0, F.concat(F.lit("k"), (F.col("id") % 11).cast("string"))).alias("key"))
    _write(df, broker, {**EXACTLY_ONCE, "topic": topic})
    got = _read_to_end(kind, broker, _partitions(topic, 3))
    assert Counter(got) == Counter(f"{topic}-{i}".encode() for i in range(rows))


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_failing_task_aborts_its_transaction_and_the_job_leaves_nothing(spark, broker, admin, kind):
    """The task fails after its rows were stored (a null 'topic' in its last row): nothing of
    the job is ever delivered, and a message sent afterwards is delivered at once, so no
    transaction of the job stayed open (the timeout is far longer than the test)."""
    topic = f"persistent://public/default/eo-fail-{kind}"
    rows = [(f"doomed-{i}".encode(), topic if i < 1999 else None) for i in range(2000)]
    df = spark.createDataFrame(rows, StructType([StructField("value", BinaryType()),
                                                 StructField("topic", StringType())])).coalesce(1)
    df = df.withColumn("value", _slowly()(df["value"]))  # the last row comes seconds after the first ones are stored
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")  # rows reach the sink a few at a time
    try:
        with pytest.raises(Exception, match="null 'topic'"):
            _write(df, broker, {**EXACTLY_ONCE, "transactionTimeoutSeconds": "3600"})
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert admin.stats(topic)["msgInCounter"] > 0  # the failed task's rows were stored
    with magnetar.client.Client(broker.url) as plain:
        plain.create_producer(topic).send(b"after")
    assert _read_to_end(kind, broker, [topic]) == [b"after"]


def test_exactly_once_option_errors_name_the_option(spark, broker):
    df = spark.createDataFrame([(b"x", "t")], "value binary, topic string")
    with pytest.raises(Exception, match="entryFormat=pulsar"):
        _write(df, broker, {"exactlyOnce": "true", "entryFormat": "arrow", "topic": "t"})
    with pytest.raises(Exception, match="option 'exactlyOnce' must be false or true"):
        _write(df, broker, {"exactlyOnce": "yes", "topic": "t"})
    stream = spark.readStream.format("rate").load().select(F.lit(b"x").alias("value"), F.lit("t").alias("topic"))
    with pytest.raises(Exception, match="commitNamespace"):
        stream.writeStream.format("magnetar").option("service.url", broker.url).option("exactlyOnce", "true") \
            .option("checkpointLocation", "/nonexistent-eos-checkpoint").start().awaitTermination(30)


def _stream(spark, broker: Standalone, source: str, sink: str, checkpoint: Path, pace=None):
    df = spark.readStream.format("magnetar").option("topic", source).option("startingOffsets", "earliest") \
        .load(str(broker.data_dir)).select("value", "key")
    if pace is not None:
        df = df.withColumn("value", pace(df["value"]))
    writer = df.writeStream.format("magnetar").option("service.url", broker.url).option("topic", sink) \
        .option("checkpointLocation", str(checkpoint))
    for key, value in EXACTLY_ONCE.items():
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()


def _send_input(broker: Standalone, topic: str, values: list[bytes]) -> None:
    with official_client(broker) as client:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=40,
                                          block_if_queue_full=True)
        for i, value in enumerate(values):
            producer.send_async(value, None, partition_key=f"k{i % 7}")
        producer.flush()


def _source_rows(spark, broker: Standalone, topic: str) -> int:
    return spark.read.format("magnetar").option("topic", topic).load(str(broker.data_dir)).count()


def _prepare(spark, broker: Standalone, admin: AdminClient, name: str, partitions: int, rows: int) -> list[bytes]:
    """`<name>-out` with `partitions` partitions, and `rows` values on `<name>-in` that the
    stream's source sees whole; returns the values."""
    admin.create_partitioned_topic(f"persistent://public/default/{name}-out", partitions)
    sent = [f"{name}-{i}".encode() for i in range(rows)]
    _send_input(broker, f"{name}-in", sent)
    assert wait_for(lambda: _source_rows(spark, broker, f"{name}-in") == len(sent), timeout=60)
    return sent


def test_stream_killed_mid_batch_and_restarted_stores_each_row_once(spark, broker, admin, tmp_path):
    sink = "eo-stream-out"
    sent = _prepare(spark, broker, admin, "eo-stream", 3, 3000)
    checkpoint = tmp_path / "checkpoint"
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        query = _stream(spark, broker, "eo-stream-in", sink, checkpoint, _slowly())
        stats = f"persistent://public/default/{sink}"
        assert wait_for(lambda: admin.partitioned_stats(stats)["msgInCounter"] > 0, timeout=60)
        assert _kill_spark_python_workers() > 0
        with pytest.raises(StreamingQueryException):  # "Python worker exited", worded several ways
            query.awaitTermination(120)
        # Stored, but in transactions nobody committed: no reader gets any of it.
        assert _read_to_end("magnetar", broker, _partitions(sink, 3)) == []
        _stream(spark, broker, "eo-stream-in", sink, checkpoint).awaitTermination(120)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    # The restart's commit aborted the killed run's transactions (they would hold readers
    # back for the 300 s timeout): every row is readable at once, each once.
    for kind in CLIENTS:
        assert Counter(_read_to_end(kind, broker, _partitions(sink, 3))) == Counter(sent)


def test_a_replayed_micro_batch_that_was_committed_is_not_stored_again(spark, broker, admin, tmp_path):
    """The driver died after the sink committed micro-batch 0 but before Spark recorded it:
    Spark's checkpoint then lacks commits/0, and the restarted query runs batch 0 again."""
    sink = "eo-replay-out"
    sent = _prepare(spark, broker, admin, "eo-replay", 2, 500)
    checkpoint = tmp_path / "checkpoint"
    _stream(spark, broker, "eo-replay-in", sink, checkpoint).awaitTermination(120)
    committed = checkpoint / "commits" / "0"
    assert committed.exists()
    committed.unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)  # Spark's checksum, or it takes 0 as written
    _stream(spark, broker, "eo-replay-in", sink, checkpoint).awaitTermination(120)
    assert committed.exists()  # batch 0 ran again, and Spark committed it this time
    for kind in CLIENTS:
        assert Counter(_read_to_end(kind, broker, _partitions(sink, 2))) == Counter(sent)
    records = _read_to_end("magnetar", broker, _commit_topics(admin))  # the decision the replay found
    assert any(json.loads(r)["batch"] == 0 for r in records)


def _commit_topics(admin: AdminClient) -> list[str]:
    return [t for t in admin.topics("public/default") if "spark-sink-commits-" in t]


def test_a_task_waits_for_every_send_of_its_transaction_before_its_producers_close(broker):
    """A task's rows handed over faster than they are stored (Arrow batches ready at once):
    every send of its transaction is answered before its producers close (their flush covers
    a transaction's messages), and the driver's commit shows every row."""
    topic = "persistent://public/default/eo-in-flight"
    options = WriteOptions(service_url=broker.url, topic=topic, columns=("value",), exactly_once=True)
    batches = [pa.RecordBatch.from_pydict({"value": [b"f-%d" % i for i in range(j, j + 1000)]})
               for j in range(0, 10_000, 1000)]
    message = write_task_in_txn(options, iter(batches), None)
    assert message.rows == 10_000
    commit_batch(options, [message], None)
    assert Counter(_read_to_end("magnetar", broker, [topic])) == Counter(b"f-%d" % i for i in range(10_000))
