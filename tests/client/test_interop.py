"""Interop: magnetar.client producers feed official consumers and the reverse, for every codec."""

from __future__ import annotations

import pulsar
import pytest

import magnetar.client

CODECS = ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"]
PAIRS = [(magnetar.client, pulsar), (pulsar, magnetar.client)]


def _client(module, url):
    if module is pulsar:
        return pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    return module.Client(url, operation_timeout_seconds=10)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize(("producing", "consuming"), PAIRS, ids=["ours-to-official", "official-to-ours"])
def test_every_codec_both_ways(shared_broker, topic, codec, batching, producing, consuming):
    producer_client = _client(producing, shared_broker.service_url)
    consumer_client = _client(consuming, shared_broker.service_url)
    try:
        consumer = consumer_client.subscribe(topic, "sub")
        producer = producer_client.create_producer(
            topic, batching_enabled=batching, batching_max_publish_delay_ms=20,
            compression_type=getattr(producing.CompressionType, codec))
        ids = []
        for i in range(30):
            producer.send_async(f"payload-{i}".encode() * (i + 1), lambda res, mid: ids.append(str(mid)),
                                properties={"n": str(i)}, partition_key=f"key-{i % 4}",
                                event_timestamp=1_700_000_000_000 + i)
        producer.send_async(None, lambda res, mid: ids.append(str(mid)), partition_key="tombstone")
        producer.flush()
        got = []
        for _ in range(31):
            msg = consumer.receive(10_000)
            consumer.acknowledge(msg)
            got.append(msg)
        assert [m.data() for m in got[:30]] == [f"payload-{i}".encode() * (i + 1) for i in range(30)]
        assert [m.properties() for m in got[:30]] == [{"n": str(i)} for i in range(30)]
        assert [m.partition_key() for m in got[:30]] == [f"key-{i % 4}" for i in range(30)]
        assert [m.event_timestamp() for m in got[:30]] == [1_700_000_000_000 + i for i in range(30)]
        assert got[30].has_null_value() and got[30].data() == b""
        assert [str(m.message_id()) for m in got] == ids
        assert all(m.producer_name() == producer.producer_name() for m in got)
    finally:
        producer_client.close()
        consumer_client.close()
