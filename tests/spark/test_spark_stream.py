"""Streaming: offsets are PIP-70 indexes, so a restarted query resumes exactly (no loss, no duplicate)."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from polling import wait_for
from pyspark.errors import StreamingQueryException
from seeds import fresh_seed
from spark_helpers import INTERCEPTORS, official_client
from standalone import NO_ENTRY_METADATA, Standalone

from magnetar.spark.options import parse_options
from magnetar.spark.source import MagnetarBatchReader

pytestmark = pytest.mark.spark


def _send(client, topic, start, count):
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=7, batching_max_publish_delay_ms=2, block_if_queue_full=True
    )
    for i in range(start, start + count):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    producer.close()


EXPOSING = "exposingBrokerEntryMetadataToClientEnabled=true"


def _run(spark, broker, checkpoint, out, via="path", **options):
    """Run the stream to what is stored now; `via` says how it reaches the broker's topics."""
    reader = spark.readStream.format("magnetar").option("topic", "s").option("startingOffsets", "earliest")
    for k, v in options.items():
        reader = reader.option(k, v)
    if via == "service.url":
        reader = reader.option("service.url", broker.url)
    query = (
        (reader.load() if via == "service.url" else reader.load(str(broker.data_dir)))
        .select("index", "value")
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .option("path", str(out))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    batches = len([p for p in query.recentProgress if p["numInputRows"] > 0])
    query.stop()
    return batches


def _read_out(spark, out):
    return sorted(int(bytes(r["value"])) for r in spark.read.parquet(str(out)).collect())


@pytest.mark.parametrize("via", ["path", "service.url"])
def test_restarted_query_resumes_exactly_across_a_broker_restart(spark, broker_factory, client_factory, tmp_path, via):
    broker = broker_factory(INTERCEPTORS, EXPOSING)
    client = client_factory(broker.url)
    _send(client, "s", 0, 100)
    checkpoint, out = tmp_path / "ck", tmp_path / "out"

    batches = _run(spark, broker, checkpoint, out, via, maxMessagesPerTrigger="30")
    assert _read_out(spark, out) == list(range(100))
    assert batches >= 4  # 100 messages, at most 30 per trigger (mid-batch ends resume exactly)

    _send(client, "s", 100, 50)
    client.close()
    broker.restart()  # new ledgers; the index carries on from the last entry
    client = client_factory(broker.url)
    _send(client, "s", 150, 25)

    _run(spark, broker, checkpoint, out, via)
    assert _read_out(spark, out) == list(range(175))
    _run(spark, broker, checkpoint, out, via)  # nothing new: nothing read twice
    assert _read_out(spark, out) == list(range(175))


@pytest.mark.parametrize(("config", "via"), [(NO_ENTRY_METADATA, "path"),
                                             ((INTERCEPTORS, "exposingBrokerEntryMetadataToClientEnabled=false"),
                                              "service.url")])
def test_stream_without_an_index_is_refused(spark, broker_factory, client_factory, tmp_path, config, via):
    """No index stored, or (over the protocol) none exposed: a stream has no offsets, so it refuses."""
    broker = broker_factory(*config)
    _send(client_factory(broker.url), "s", 0, 5)
    with pytest.raises(Exception, match="AppendIndexMetadataInterceptor"):
        _run(spark, broker, tmp_path / "ck", tmp_path / "out", via)


def test_running_stream_over_service_url_survives_a_broker_restart(spark, broker_factory, client_factory):
    """The driver keeps one connection for the query's life; a broker restart must not end it."""
    broker = broker_factory(INTERCEPTORS, EXPOSING)
    client = client_factory(broker.url)
    _send(client, "s", 0, 40)
    reader = (
        spark.readStream.format("magnetar")
        .option("service.url", broker.url)
        .option("topic", "s")
        .option("startingOffsets", "earliest")
    )
    query = reader.load().select("value").writeStream.format("memory").queryName("survivor").start()
    try:
        query.processAllAvailable()
        client.close()
        broker.restart()
        _send(client_factory(broker.url), "s", 40, 30)
        query.processAllAvailable()
        got = sorted(int(bytes(r["value"])) for r in spark.sql("SELECT value FROM survivor").collect())
        assert got == list(range(70))
    finally:
        query.stop()


# -- pulsar-spark's message ids as offsets, on a topic whose ledgers roll every few entries

SMALL_LEDGERS = ("managedLedgerMaxEntriesPerLedger=5", "managedLedgerMinLedgerRolloverTimeMinutes=0")
Position = tuple[int, int, int]
"""(ledger, entry, batch index) of a message, as the official client reports its id."""


@pytest.fixture(scope="module")
def rolled(tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("rolled") / "data", [INTERCEPTORS, EXPOSING, *SMALL_LEDGERS]).start()
    yield broker
    broker.stop()


def _send_batches(client, topic: str, sizes: list[int], first: int = 0) -> None:
    """One batch entry per size (flushed one at a time), every message with its own key, as a
    default-batching producer sends messages of many keys."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=60_000)
    i = first
    for size in sizes:
        for _ in range(size):
            producer.send_async(str(i).encode(), None, partition_key=f"key-{i}")
            i += 1
        producer.flush()
    producer.close()


def _ids(client, topic: str, count: int) -> dict[Position, pulsar.MessageId]:
    """Every message's id as the official client receives it, by position."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        ids = [reader.read_next(10_000).message_id() for _ in range(count)]
    finally:
        reader.close()
    return {(m.ledger_id(), m.entry_id(), m.batch_index()): m for m in ids}


def _pulsar_spark_json(topic: str, message_id: pulsar.MessageId) -> str:
    """An offset as pulsar-spark's JsonUtils writes it: the id's bytes as signed byte values."""
    return json.dumps({f"persistent://public/default/{topic}": [b - 256 if b > 127 else b
                                                                for b in message_id.serialize()]})


@pytest.fixture(scope="module")
def ledgers_topic(rolled: Standalone) -> dict[Position, pulsar.MessageId]:
    """Batches of 1 to 6 messages over at least four ledgers of five entries."""
    rnd = random.Random(fresh_seed())
    sizes = [rnd.randint(1, 6) for _ in range(22)]
    with official_client(rolled) as client:
        _send_batches(client, "ledgers", sizes)
        ids = _ids(client, "ledgers", sum(sizes))
    assert len({ledger for ledger, _entry, _index in ids}) >= 4
    return ids


def _read_positions(spark, broker: Standalone, via: str, **options: str) -> list[Position]:
    reader = spark.read.format("magnetar").option("topic", "ledgers")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.option("service.url", broker.url).load() if via == "service.url" else reader.load(str(broker.data_dir))
    return sorted((r.ledger_id, r.entry_id, r.batch_index) for r in df.collect())


@pytest.mark.parametrize("via", ["path", "service.url"])
def test_message_id_offsets_in_earlier_ledgers_and_at_a_ledgers_last_entry(spark, rolled, ledgers_topic, via):
    """pulsar-spark starts at a given id (inclusive, inside a batch too) and reads on to the end
    of the entry holding its ending id, whichever ledger holds them."""
    every = sorted(ledgers_topic)
    ledgers = sorted({p[0] for p in every})
    rnd = random.Random(fresh_seed() + len(via))
    earlier = [p for p in every if p[0] < ledgers[-1]]  # not in the ledger being written
    last_entries = {ledger: max(p[1] for p in every if p[0] == ledger) for ledger in ledgers[:-1]}
    at_ledger_ends = [p for p in earlier if p[1] == last_entries[p[0]]]
    for start in (rnd.choice(earlier), rnd.choice(at_ledger_ends)):
        starting = _pulsar_spark_json("ledgers", ledgers_topic[start])
        assert _read_positions(spark, rolled, via, startingOffsets=starting) == [p for p in every if p >= start]
    for end in (rnd.choice(at_ledger_ends), rnd.choice(earlier)):
        ending = _pulsar_spark_json("ledgers", ledgers_topic[end])
        assert _read_positions(spark, rolled, via, endingOffsets=ending) == [p for p in every if p[:2] <= end[:2]]
    start, end = sorted(rnd.sample(earlier, 2))
    both = {"startingOffsets": _pulsar_spark_json("ledgers", ledgers_topic[start]),
            "endingOffsets": _pulsar_spark_json("ledgers", ledgers_topic[end])}
    assert _read_positions(spark, rolled, via, **both) == [p for p in every if start <= p and p[:2] <= end[:2]]


def test_stream_started_inside_a_batch_of_many_keys(spark, rolled, tmp_path):
    """A stream from a message id inside a batch: that message is the first row, none before it
    in its batch, and nothing after it is lost, in this micro-batch or the next ones."""
    with official_client(rolled) as client:
        # Batching on (the Python client's default is off), the default batch type and its other defaults.
        producer = client.create_producer("keyed", batching_enabled=True)
        for i in range(300):
            producer.send_async(str(i).encode(), None, partition_key=f"key-{i % 41}")
        producer.flush()
        ids = _ids(client, "keyed", 300)
        in_batch = [p for p in sorted(ids) if p[2] > 0 and (p[0], p[1], p[2] + 1) in ids]
        assert in_batch, "the producer batched nothing"
        start = random.Random(fresh_seed()).choice(in_batch)
        stream = (spark.readStream.format("magnetar").option("topic", "keyed").option("maxMessagesPerTrigger", 70)
                  .option("startingOffsets", _pulsar_spark_json("keyed", ids[start])).load(str(rolled.data_dir)))
        query = (stream.select("ledger_id", "entry_id", "batch_index", "value").writeStream.format("memory")
                 .queryName("from_inside_a_batch").option("checkpointLocation", str(tmp_path / "ck")).start())
        try:
            query.processAllAvailable()
            for i in range(300, 400):
                producer.send_async(str(i).encode(), None, partition_key=f"key-{i % 41}")
            producer.flush()
            assert wait_for(lambda: _stored(rolled, "keyed") == 400, timeout=60)
            query.processAllAvailable()
            rows = spark.sql("SELECT * FROM from_inside_a_batch").collect()
        finally:
            query.stop()
        producer.close()
    rows = sorted(rows, key=lambda r: (r.ledger_id, r.entry_id, r.batch_index))
    assert (rows[0].ledger_id, rows[0].entry_id, rows[0].batch_index) == start
    assert [int(bytes(r.value)) for r in rows] == list(range(sorted(ids).index(start), 400))


def _values(broker: Standalone, topic: str) -> list[bytes]:
    """The topic's values as the source's reader reads them from the data directory, in this
    process: cheaper than a Spark job for the waits and counts around the queries under test."""
    reader = MagnetarBatchReader(parse_options({"path": str(broker.data_dir), "topic": topic}))
    return [v for part in reader.partitions() for batch in reader.read(part) for v in batch.column("value").to_pylist()]


def _stored(broker: Standalone, topic: str) -> int:
    return len(_values(broker, topic))


def _write_stream(spark, broker: Standalone, checkpoint: Path, wait_seconds: int = 3):
    """A stream copying `w-in` (read from the data directory) to `w-out` through the broker,
    which the sink waits `wait_seconds` for when it refuses connections."""
    df = (spark.readStream.format("magnetar").option("topic", "w-in").option("startingOffsets", "earliest")
          .load(str(broker.data_dir)).select("value", "key"))
    return (df.writeStream.format("magnetar").option("service.url", broker.url).option("topic", "w-out")
            .option("operationTimeoutSeconds", wait_seconds).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start())


def _written(broker: Standalone) -> Counter:
    return Counter(int(value) for value in _values(broker, "w-out"))


def _send_stored(broker: Standalone, client, start: int, count: int) -> None:
    """Send `w-in` messages start.. and wait until the data directory shows them all."""
    _send(client, "w-in", start, count)
    assert wait_for(lambda: _stored(broker, "w-in") == start + count, timeout=60)


def test_stream_write_resumes_from_its_checkpoint_after_a_broker_restart(spark, broker_factory, client_factory,
                                                                         tmp_path):
    """A micro-batch planned while the sink's broker is down waits for it for the operation
    timeout, then fails the query; restarted from its checkpoint once the broker is back, the
    query writes that micro-batch again. Without deduplication (Pulsar's default) that is at
    least once: nothing is lost, and rows a failed attempt stored before failing would be stored
    again; committed micro-batches are not replayed."""
    broker = broker_factory(INTERCEPTORS)
    client = client_factory(broker.url)
    checkpoint = tmp_path / "ck"
    _send_stored(broker, client, 0, 500)
    _write_stream(spark, broker, checkpoint).awaitTermination(120)
    assert _written(broker) == Counter(range(500))

    _send_stored(broker, client, 500, 500)
    client.close()
    broker.stop()
    with pytest.raises(StreamingQueryException, match="cannot connect to"):
        _write_stream(spark, broker, checkpoint).awaitTermination(120)
    broker.start()
    _write_stream(spark, broker, checkpoint).awaitTermination(120)
    written = _written(broker)
    assert sorted(written) == list(range(1000))  # none lost
    assert written == Counter(range(1000))  # nor doubled: the failed attempt stored nothing

    client = client_factory(broker.url)
    _send_stored(broker, client, 1000, 100)
    _write_stream(spark, broker, checkpoint).awaitTermination(120)
    written = _written(broker)
    assert written == Counter(range(1100))  # the next micro-batch, once

    _send_stored(broker, client, 1100, 100)
    client.close()
    broker.stop()
    query = _write_stream(spark, broker, checkpoint, wait_seconds=120)
    tracker = spark.sparkContext.statusTracker()
    assert wait_for(lambda: tracker.getActiveStageIds() or not query.isActive, timeout=60)
    broker.start()  # while the micro-batch's task waits for it
    query.awaitTermination(120)
    assert _written(broker) == written + Counter(range(1100, 1200))
