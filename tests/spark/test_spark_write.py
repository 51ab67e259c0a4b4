"""Writing topics from Spark: rows read back equal, keys routed as the official client routes,
streams exactly once across a query killed mid-batch and restarted from its checkpoint."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from polling import wait_for
from procfs import descendants, parent
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType, TimestampType
from pyspark.sql.utils import AnalysisException
from spark_helpers import INTERCEPTORS, millis, official_client
from standalone import Standalone

from magnetar.admin_client import AdminClient
from magnetar.client.aio.routing import boost_string_hash
from magnetar.spark.options import KNOWN
from magnetar.spark.write_options import WRITE_KNOWN

pytestmark = pytest.mark.spark

DEDUP = "brokerDeduplicationEnabled=true"
SCHEMA = StructType([
    StructField("value", BinaryType()),
    StructField("key", StringType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("event_time", TimestampType()),
])


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("write") / "data", [INTERCEPTORS, DEDUP]).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def admin(broker: Standalone) -> AdminClient:
    return AdminClient(broker.admin_url)


@pytest.fixture(scope="module")
def official(broker: Standalone) -> Iterator[pulsar.Client]:
    with official_client(broker) as client:
        yield client


def _rows(n: int, tag: str) -> list[tuple]:
    base = dt.datetime(2026, 11, 23, 10, 0, tzinfo=dt.UTC)
    return [
        (f"{tag}-{i}".encode() * (1 + i % 3), f"k{i % 17}" if i % 4 else None,
         {"i": str(i)} if i % 5 else {}, base + dt.timedelta(milliseconds=i) if i % 2 else None)
        for i in range(n)
    ]


def _read_back(spark, broker: Standalone, topic: str) -> list:
    return spark.read.format("magnetar").option("topic", topic).load(str(broker.data_dir)).collect()


def _as_sent(row) -> tuple:
    return (bytes(row["value"]), row["key"], tuple(sorted((row["properties"] or {}).items())),
            millis(row["event_time"]))


def _expected(rows: list[tuple]) -> Counter:
    return Counter((v, k, tuple(sorted(p.items())), None if t is None else int(t.timestamp() * 1000))
                   for v, k, p, t in rows)


def test_batch_write_reads_back_every_column_on_a_partitioned_topic(spark, broker, admin):
    admin.create_partitioned_topic("persistent://public/default/bw", 3)
    rows = _rows(500, "bw")
    spark.createDataFrame(rows, SCHEMA).repartition(2).write.format("magnetar") \
        .option("service.url", broker.url).option("topic", "bw").option("compression", "lz4").mode("append").save()
    got = _read_back(spark, broker, "bw")
    assert Counter(_as_sent(r) for r in got) == _expected(rows)
    for r in got:  # keyed rows sit where the official client's BoostHash routing puts them
        if r["key"] is not None:
            assert r["partition"] == boost_string_hash(r["key"]) % 3


def test_deliver_at_becomes_the_entry_deliver_at_time(spark, broker, admin):
    base = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    rows = [(f"d-{i}".encode(), base + dt.timedelta(seconds=i)) for i in range(3)]
    spark.createDataFrame(rows, "value binary, deliver_at timestamp").write.format("magnetar") \
        .option("service.url", broker.url).option("topic", "delayed").mode("append").save()
    got = {}
    for r in _read_back(spark, broker, "delayed"):
        message = admin.get_message_by_id("persistent://public/default/delayed", r["ledger_id"], r["entry_id"])
        got[bytes(r["value"])] = message.headers["X-Pulsar-deliver-at-time"]
    assert got == {v: when.isoformat(timespec="milliseconds").replace("+00:00", "Z") for v, when in rows}


def test_batched_filter_properties_label_each_batch(spark, broker, admin):
    rows = [(f"f-{i}".encode(), {"colour": "red" if (i // 7) % 2 else "blue", "i": str(i)}) for i in range(60)]
    spark.createDataFrame(rows, "value binary, properties map<string,string>").coalesce(1).write \
        .format("magnetar").option("service.url", broker.url).option("topic", "filtered") \
        .option("batchedFilterProperties", "colour").mode("append").save()
    entries: dict[tuple[int, int], set[str]] = {}
    for r in _read_back(spark, broker, "filtered"):
        entries.setdefault((r["ledger_id"], r["entry_id"]), set()).add(r["properties"]["colour"])
    assert len(entries) >= 8  # a batch ends where the colour changes
    for (ledger, entry), colours in entries.items():
        message = admin.get_message_by_id("persistent://public/default/filtered", ledger, entry)
        assert colours == {message.properties["colour"]}  # PIP-191: the batch carries its messages' value


def test_keys_land_where_the_official_client_puts_them(spark, broker, admin, official):
    admin.create_partitioned_topic("persistent://public/default/routed", 5)
    keys = [f"user-{i}" for i in range(40)] + ["a", "é", "日本語", "a-much-longer-key-than-eight-bytes"]
    producer = official.create_producer("routed", batching_enabled=False)
    official_partitions = {k: producer.send(b"official", partition_key=k).partition() for k in keys}
    producer.close()
    df = spark.createDataFrame([(b"spark", k) for k in keys], "value binary, key string")
    df.write.format("magnetar").option("service.url", broker.url).option("topic", "routed").mode("append").save()
    got = _read_back(spark, broker, "routed")
    spark_partitions = {r["key"]: r["partition"] for r in got if bytes(r["value"]) == b"spark"}
    assert spark_partitions == official_partitions


def test_arrow_entries_and_a_topic_column(spark, broker):
    rows = [(f"a-{i}".encode(), f"k{i % 3}", f"arrow-{i % 2}") for i in range(300)]
    df = spark.createDataFrame(rows, "value binary, key string, topic string")
    df.write.format("magnetar").option("service.url", broker.url).option("entryFormat", "arrow") \
        .option("batchingMaxMessages", 64).mode("append").save()
    for t in (0, 1):
        got = _read_back(spark, broker, f"arrow-{t}")
        assert Counter((bytes(r["value"]), r["key"]) for r in got) == Counter(
            (v, k) for v, k, topic in rows if topic == f"arrow-{t}")


def test_unknown_or_mistyped_columns_fail_at_planning_naming_the_column(spark, broker):
    writer = spark.createDataFrame([(b"v", 1)], "value binary, colour int").write.format("magnetar") \
        .option("service.url", broker.url).option("topic", "never").mode("append")
    with pytest.raises(AnalysisException) as info:
        writer.save()
    assert "column 'colour' is not one the magnetar sink writes" in str(info.value).splitlines()[0]
    bad_type = spark.createDataFrame([(b"v", 1)], "value binary, key int").write.format("magnetar") \
        .option("service.url", broker.url).option("topic", "never").mode("append")
    with pytest.raises(AnalysisException) as info:
        bad_type.save()
    assert "column 'key' must be string, got int" in str(info.value).splitlines()[0]


def test_option_errors_lead_and_every_listed_option_is_documented(spark, broker):
    with pytest.raises(AnalysisException) as info:
        spark.read.format("magnetar").option("topic", "t").option("bogus", "1").load(str(broker.data_dir))
    first = str(info.value).splitlines()[0]
    assert "MagnetarOptionError: unknown option(s) bogus; known: " in first
    listed = first.split("known: ", 1)[1].split(", ")
    with pytest.raises(AnalysisException) as info:
        spark.createDataFrame([(b"v",)], "value binary").write.format("magnetar").option("topic", "t") \
            .option("service.url", broker.url).option("compresion", "lz4").mode("append").save()
    first = str(info.value).splitlines()[0]
    assert "unknown write option(s) compresion (did you mean compression?); known: " in first
    listed += first.split("known: ", 1)[1].split(", ")
    docs = (Path(__file__).parents[2] / "docs" / "spark.md").read_text()
    documented = {name.lower() for name in re.findall(r"`([A-Za-z.]+)`", docs)}
    assert set(listed) == set(KNOWN) | set(WRITE_KNOWN)
    assert not {name.lower() for name in listed} - documented


def _slowly() -> object:
    """A pass-through UDF on `value` that paces the micro-batch (a few seconds for the test's
    rows), so the test can kill its workers while the sink is half-way through."""

    def pace(value: bytes) -> bytes:
        import time  # noqa: PLC0415 (runs on a Spark worker)

        time.sleep(0.002)  # pacing the input, not synchronisation: the test polls the broker
        return value

    return F.udf(pace, BinaryType())


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _kill_spark_python_workers() -> int:
    """SIGKILL the Python workers this test process's Spark forked (children of its
    pyspark.daemon), as when an executor dies mid-task. Returns how many were killed."""
    daemons = {pid for pid in descendants(os.getpid()) if b"pyspark.daemon" in _cmdline(pid)}
    workers = [pid for pid in daemons if parent(pid) in daemons]
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    return len(workers)


def _stream(spark, broker: Standalone, source: str, sink: str, checkpoint: Path, pace=None):
    df = spark.readStream.format("magnetar").option("topic", source).option("startingOffsets", "earliest") \
        .load(str(broker.data_dir)).select("value", "key", "properties", "event_time")
    if pace is not None:
        df = df.withColumn("value", pace(df["value"]))
    return df.writeStream.format("magnetar").option("service.url", broker.url).option("topic", sink) \
        .option("batchingMaxMessages", 25).option("checkpointLocation", str(checkpoint)) \
        .trigger(availableNow=True).start()


def test_stream_is_exactly_once_across_a_query_killed_mid_batch(spark, broker, admin, official, tmp_path):
    admin.create_partitioned_topic("persistent://public/default/eo-out", 3)
    producer = official.create_producer("eo-in", batching_enabled=True, batching_max_messages=40,
                                      block_if_queue_full=True)
    sent = [(f"eo-{i}".encode(), f"k{i % 7}" if i % 3 else None, (("i", str(i)),) if i % 2 else (),
             1_700_000_000_000 + i if i % 5 else None) for i in range(5000)]
    for value, key, properties, event_time in sent:
        extra = {"partition_key": key, "properties": dict(properties), "event_timestamp": event_time}
        producer.send_async(value, None, **{k: v for k, v in extra.items() if v})
    producer.flush()
    # A data directory shows entries once durable: the micro-batch must hold every row sent.
    assert wait_for(lambda: len(_read_back(spark, broker, "eo-in")) == len(sent), timeout=60)
    checkpoint = tmp_path / "checkpoint"
    # Rows reach the sink's worker in Arrow batches of this many: small, so that the sink
    # stores rows while the micro-batch is still being read.
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    stats = "persistent://public/default/eo-out"

    query = _stream(spark, broker, "eo-in", "eo-out", checkpoint, _slowly())
    assert wait_for(lambda: admin.partitioned_stats(stats)["msgInCounter"] > 0, timeout=60)
    assert _kill_spark_python_workers() > 0
    with pytest.raises(StreamingQueryException):  # "Python worker exited", worded several ways
        query.awaitTermination(120)
    partial = len(_read_back(spark, broker, "eo-out"))
    assert 0 < partial < len(sent)  # the killed run stored part of the micro-batch

    _stream(spark, broker, "eo-in", "eo-out", checkpoint).awaitTermination(120)
    got = Counter(_as_sent(r) for r in _read_back(spark, broker, "eo-out"))
    assert got == Counter(sent)  # every row exactly once, every column as sent

    more = [(f"eo-more-{i}".encode(), None, (), None) for i in range(200)]
    for value, *_ in more:
        producer.send_async(value, None)
    producer.flush()
    producer.close()
    assert wait_for(lambda: len(_read_back(spark, broker, "eo-in")) == len(sent) + len(more), timeout=60)
    _stream(spark, broker, "eo-in", "eo-out", checkpoint).awaitTermination(120)
    got = Counter(_as_sent(r) for r in _read_back(spark, broker, "eo-out"))
    assert got == Counter(sent + more)  # the next micro-batch's rows are new, not taken for duplicates
    spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
