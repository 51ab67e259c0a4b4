"""Streaming: offsets are PIP-70 indexes, so a restarted query resumes exactly (no loss, no duplicate)."""

from __future__ import annotations

import pytest
from spark_helpers import INTERCEPTORS
from standalone import NO_ENTRY_METADATA

pytestmark = pytest.mark.spark


def _send(client, topic, start, count):
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=7, batching_max_publish_delay_ms=2
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
