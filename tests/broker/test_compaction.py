"""Topic compaction against a real broker, driven by the official client: what is stored,
what a compacted reader sees, and GetLastMessageId ending the has_message_available loop."""

from __future__ import annotations

import json

import pulsar
import pytest
from admin_http import get_json, http
from compaction_helpers import PLACEHOLDER, compact, drain, kv, status, stored_compacted, topic_path
from polling import wait_for

from magnetar.wire.batch import decode_batch
from magnetar.wire.compression import decompress
from magnetar.wire.entry import parse_entry, peek_broker_entry_metadata
from magnetar.wire.proto import pulsar_api_pb2 as pb

EARLIEST = pulsar.MessageId.earliest


def batched_producer(client: pulsar.Client, topic: str, **kwargs) -> pulsar.Producer:
    kwargs.setdefault("compression_type", pulsar.CompressionType.LZ4)
    return client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                  batching_max_publish_delay_ms=60000, **kwargs)


def send_batch(producer: pulsar.Producer, messages: list[tuple[str, bytes | None]]) -> None:
    for key, value in messages:
        producer.send_async(value, None, partition_key=key)
    producer.flush()


def compacted_reader(client: pulsar.Client, topic: str) -> pulsar.Reader:
    return client.create_reader(topic, EARLIEST, is_read_compacted=True)


FOUR = [("k0", b"v0"), ("k0", b"v1"), ("k1", b"v0"), ("k1", None)]


def test_four_message_batch_is_stored_with_its_retained_index(broker_factory, client_factory):
    broker = broker_factory("brokerEntryMetadataInterceptors=org.apache.pulsar.common.intercept."
                            "AppendBrokerTimestampMetadataInterceptor")
    client = client_factory(broker.url)
    send_batch(batched_producer(client, "four"), FOUR)
    compact(broker.admin_url, "four")

    reader = compacted_reader(client, "four")
    got = drain(reader)
    assert kv(got) == [("k0", b"v1")]
    assert got[0].message_id().batch_index() == 1
    plain = drain(client.create_reader("four", EARLIEST))
    assert [m.message_id().entry_id() for m in plain] == [got[0].message_id().entry_id()] * 4
    client.close()
    broker.stop()

    [(position, data)] = stored_compacted(broker.data_dir, "four")
    assert position.entry_id == got[0].message_id().entry_id()
    parsed = parse_entry(data)
    assert peek_broker_entry_metadata(data).HasField("broker_timestamp")  # the prefix survives
    metadata = parsed.metadata
    assert list(metadata.compacted_batch_indexes) == [1]
    assert metadata.num_messages_in_batch == 4
    assert metadata.compression == pb.LZ4
    plain_payload = decompress(pb.LZ4, parsed.payload, metadata.uncompressed_size, max_size=1 << 20)
    assert len(plain_payload) == metadata.uncompressed_size
    messages = decode_batch(plain_payload, 4)
    kept = messages[1]
    assert (kept.metadata.partition_key, bytes(kept.value)) == ("k0", b"v1")
    # byte for byte: placeholder, the original slot of k0 -> v1, placeholder, placeholder
    original_slot = len(kept.metadata.SerializeToString()).to_bytes(4, "big") + kept.metadata.SerializeToString()
    assert plain_payload == PLACEHOLDER + original_slot + b"v1" + PLACEHOLDER + PLACEHOLDER
    assert all(m.metadata.compacted_out for i, m in enumerate(messages) if i != 1)


def test_compacted_and_normal_readers_on_one_topic(broker, client_factory):
    client = client_factory(broker.url)
    producer = client.create_producer("mixed")
    for i in range(10):
        producer.send(f"a{i}".encode(), partition_key=f"k{i % 3}")
    producer.send(None, partition_key="k1")  # tombstone
    compact(broker.admin_url, "mixed")
    producer.send(b"tail", partition_key="k0")  # after the horizon

    consumer = client.subscribe("mixed", "compacted", is_read_compacted=True,
                                initial_position=pulsar.InitialPosition.Earliest)
    seen = []
    while True:
        try:
            msg = consumer.receive(2000)
        except pulsar.Timeout:
            break
        seen.append((msg.partition_key(), msg.data()))
        consumer.acknowledge(msg)
    assert seen == [("k2", b"a8"), ("k0", b"a9"), ("k0", b"tail")]
    normal = drain(client.create_reader("mixed", EARLIEST))
    assert len(normal) == 12
    reader = compacted_reader(client, "mixed")
    assert kv(drain(reader)) == seen


@pytest.mark.parametrize("batched", [False, True])
def test_topic_ending_in_tombstones(broker, client_factory, batched):
    client = client_factory(broker.url)
    topic = f"tombs-{batched}"
    messages = [("a", b"1"), ("b", b"2"), ("c", b"3"), ("b", None), ("c", None)]
    if batched:
        send_batch(batched_producer(client, topic), messages)
    else:
        producer = client.create_producer(topic)
        for key, value in messages:
            producer.send(value, partition_key=key)
    compact(broker.admin_url, topic)
    got = drain(compacted_reader(client, topic))
    assert kv(got) == [("a", b"1")]
    if batched:
        assert got[0].message_id().batch_index() == 0


@pytest.mark.parametrize(("batched", "compression"), [(True, pulsar.CompressionType.NONE),
                                                       (True, pulsar.CompressionType.LZ4),
                                                       (False, pulsar.CompressionType.NONE),
                                                       (False, pulsar.CompressionType.ZSTD)],
                         ids=["batched", "batched-lz4", "unbatched", "unbatched-zstd"])
def test_an_empty_value_deletes_its_key(broker, client_factory, batched, compression):
    """send(b"") is a tombstone too (docs/compaction.md), not only send(None): with batching
    its slot says payload_size 0; without, a compressed empty value still has bytes, and
    only uncompressed_size says it is empty."""
    client = client_factory(broker.url)
    topic = f"empty-tombs-{batched}-{compression}"
    producer = client.create_producer(topic, batching_enabled=batched, compression_type=compression)
    for key, value in [("a", b"1"), ("b", b"2"), ("a", b""), ("c", b"3"), ("c", b"")]:
        producer.send_async(value, None, partition_key=key)
    producer.flush()
    compact(broker.admin_url, topic)
    assert kv(drain(compacted_reader(client, topic))) == [("b", b"2")]
    assert len(drain(client.create_reader(topic, EARLIEST))) == 5  # the topic itself keeps them all


def test_every_key_deleted_reads_nothing(broker, client_factory):
    client = client_factory(broker.url)
    producer = client.create_producer("all-gone")
    producer.send(b"x", partition_key="a")
    producer.send(None, partition_key="a")
    compact(broker.admin_url, "all-gone")
    reader = compacted_reader(client, "all-gone")
    assert not reader.has_message_available()


def test_admin_status_and_errors(broker, client_factory):
    assert http("PUT", topic_path(broker.admin_url, "nope") + "/compaction", b"")[0] == 404
    client = client_factory(broker.url)
    client.create_producer("st").send(b"v", partition_key="k")
    assert status(broker.admin_url, "st")["status"] == "NOT_RUN"
    assert compact(broker.admin_url, "st")["lastError"] == ""
    internal = json.loads(http("GET", topic_path(broker.admin_url, "st") + "/internalStats")[2])
    assert internal["compactedLedger"]["entries"] == 1 and internal["compactedLedger"]["ledgerId"] >= 0
    ns = f"{broker.admin_url}/admin/v2/namespaces/public/default/compactionThreshold"
    assert http("PUT", ns, b"4096")[0] == 204
    assert http("GET", ns)[2] == b"4096"
    assert http("POST", topic_path(broker.admin_url, "st") + "/compactionThreshold", b"-1")[0] == 412


def test_trimming_keeps_what_the_next_compaction_must_read(broker_factory, client_factory):
    """Retention 0/0 and small ledgers: a subscription consumes everything, so trimming
    would drop the ledgers after the horizon before any compaction read them; the
    `__compaction` cursor at the horizon holds them back, as in Pulsar."""
    broker = broker_factory("managedLedgerMaxEntriesPerLedger=4", "managedLedgerMinLedgerRolloverTimeMinutes=0")
    client = client_factory(broker.url)
    topic = "trimmed-compacted"
    consumer = client.subscribe(topic, "all")
    producer = client.create_producer(topic, batching_enabled=False)

    def send_and_consume(prefix: str, key_of) -> None:
        for i in range(12):
            producer.send(f"{prefix}{i}".encode(), partition_key=key_of(i))
        for _ in range(12):
            consumer.acknowledge(consumer.receive(10_000))
        assert wait_for(lambda: get_json(topic_path(broker.admin_url, topic) + "/stats")[
            "subscriptions"]["all"]["msgBacklog"] == 0)

    send_and_consume("v", lambda i: f"k{i % 3}")
    assert compact(broker.admin_url, topic)["status"] == "SUCCESS"
    send_and_consume("w", lambda i: "k0" if i == 0 else "k1")  # k0's last value in the oldest tail ledger
    assert http("POST", topic_path(broker.admin_url, topic) + "/trim")[0] == 204
    broker.restart()  # the cursor is stored, and is no subscription of the topic
    assert get_json(topic_path(broker.admin_url, topic) + "/subscriptions") == ["all"]
    assert compact(broker.admin_url, topic)["status"] == "SUCCESS"
    assert set(_stored_values(broker, topic)) == {b"k0w0", b"k1w11", b"k2v11"}
    # the ledger under k2's compacted entry is gone: readers start at the compacted ledger's first entry
    latest = [("k0", b"w0"), ("k1", b"w11"), ("k2", b"v11")]
    client = client_factory(broker.url)
    assert sorted(kv(drain(compacted_reader(client, topic)))) == latest
    durable = client.subscribe(topic, "late", is_read_compacted=True, initial_position=pulsar.InitialPosition.Earliest)
    assert sorted(kv([durable.receive(10_000) for _ in range(3)])) == latest


def _stored_values(broker, topic: str) -> list[bytes]:
    """Partition key and value of each (non-batched) entry of the compacted ledger."""
    out = []
    for _position, data in stored_compacted(broker.data_dir, topic):
        entry = parse_entry(data)
        out.append(entry.metadata.partition_key.encode() + bytes(entry.payload))
    return out
