"""Message deduplication with the official client: resends are stored once, across restarts."""

from __future__ import annotations

import json
import time

import pulsar
import pytest
from admin_http import http
from rawclient import RawClient

from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

EARLIEST = pulsar.MessageId.earliest


def stored(client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, EARLIEST)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(10_000).data())
    reader.close()
    return got


def send_twice(client, topic: str, name: str = "dedup-producer", count: int = 10) -> pulsar.Producer:
    producer = client.create_producer(topic, producer_name=name, batching_enabled=False)
    for _ in range(2):
        for i in range(count):
            producer.send(f"m{i}".encode(), sequence_id=i)
    return producer


def test_resent_sequence_ids_are_stored_once(broker_factory, client_factory):
    broker = broker_factory("brokerDeduplicationEnabled=true")
    client = client_factory(broker.url)
    producer = send_twice(client, "dedup")
    assert stored(client, "dedup") == [f"m{i}".encode() for i in range(10)]
    producer.close()
    again = client.create_producer("dedup", producer_name="dedup-producer")
    assert again.last_sequence_id() == 9


def test_off_by_default(broker, client_factory):
    client = client_factory(broker.url)
    send_twice(client, "no-dedup").close()
    assert len(stored(client, "no-dedup")) == 20
    assert client.create_producer("no-dedup", producer_name="dedup-producer").last_sequence_id() == -1


@pytest.mark.parametrize("stop", ["restart", "kill"])
def test_state_survives_restart_and_crash(broker_factory, client_factory, stop):
    broker = broker_factory("brokerDeduplicationEnabled=true", "brokerDeduplicationEntriesInterval=4")
    client = client_factory(broker.url)
    producer = client.create_producer("dedup-durable", producer_name="p", batching_enabled=False)
    for i in range(15):  # snapshots at 4, 8, 12; the last three come from replaying the ledger
        producer.send(f"m{i}".encode(), sequence_id=i)
    client.close()
    if stop == "kill":
        broker.kill()
        broker.start()
    else:
        broker.restart()
    client = client_factory(broker.url)
    producer = client.create_producer("dedup-durable", producer_name="p", batching_enabled=False)
    assert producer.last_sequence_id() == 14
    for i in range(10, 17):
        producer.send(f"m{i}".encode(), sequence_id=i)
    assert stored(client, "dedup-durable") == [f"m{i}".encode() for i in range(17)]


def test_batched_resends_are_stored_once(broker_factory, client_factory):
    broker = broker_factory("brokerDeduplicationEnabled=true")
    client = client_factory(broker.url)
    producer = client.create_producer("dedup-batched", producer_name="b", batching_enabled=True,
                                      batching_max_messages=5, batching_max_publish_delay_ms=10_000)
    for _ in range(2):
        for i in range(10):
            producer.send_async(f"m{i}".encode(), None, sequence_id=i)
        producer.flush()
    assert stored(client, "dedup-batched") == [f"m{i}".encode() for i in range(10)]


def test_namespace_and_topic_policies(broker, client_factory):
    base = f"{broker.admin_url}/admin/v2"
    assert http("POST", f"{base}/namespaces/public/default/deduplication", b"true")[0] == 204
    assert json.loads(http("GET", f"{base}/namespaces/public/default/deduplication")[2]) is True
    assert http("POST", f"{base}/namespaces/public/default/deduplication", b"7")[0] == 412
    client = client_factory(broker.url)
    send_twice(client, "by-namespace").close()
    assert len(stored(client, "by-namespace")) == 10
    client.create_producer("by-topic").close()
    assert http("POST", f"{base}/persistent/public/default/by-topic/deduplicationEnabled", b"false")[0] == 204
    send_twice(client, "by-topic").close()
    assert len(stored(client, "by-topic")) == 20


def test_a_batch_counts_as_the_same_sequence_id_before_and_after_a_crash(broker_factory, client_factory):
    """The official client's batches carry their first message's sequence id and no highest one:
    the broker must record the same id for them live and when it rebuilds its state from the
    ledger after a crash (Pulsar: max(highest_sequence_id, sequence_id) both ways), or a
    producer's last_sequence_id changes with a crash."""
    broker = broker_factory("brokerDeduplicationEnabled=true", "brokerDeduplicationEntriesInterval=1000")
    client = client_factory(broker.url)
    producer = client.create_producer("dedup-batch-ids", producer_name="b", batching_enabled=True,
                                      batching_max_messages=5, batching_max_publish_delay_ms=10_000)
    for i in range(10):
        producer.send_async(f"m{i}".encode(), None, sequence_id=i)
    producer.flush()
    producer.close()
    live = client.create_producer("dedup-batch-ids", producer_name="b").last_sequence_id()
    client.close()
    broker.kill()  # no snapshot at shutdown: the state is replayed from the stored entries
    broker.start()
    client = client_factory(broker.url)
    assert client.create_producer("dedup-batch-ids", producer_name="b").last_sequence_id() == live == 5


def test_a_highest_sequence_id_below_the_sequence_id_is_ignored(broker_factory):
    """Pulsar takes a SEND's highest_sequence_id only when it is at least its sequence_id:
    the receipt and deduplication go by the larger id, so a resend of a lower id is a duplicate."""
    broker = broker_factory("brokerDeduplicationEnabled=true")
    raw = RawClient(broker.url)
    raw.connect()
    name = raw.create_producer("dedup-highest")

    def send(sequence_id: int, highest: int | None) -> pb.CommandSendReceipt:
        metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=int(time.time() * 1000))
        send = pb.CommandSend(producer_id=0, sequence_id=sequence_id, highest_sequence_id=highest)
        raw.command(pb.BaseCommand(type=pb.BaseCommand.SEND, send=send), build_entry(metadata, b"m"))
        return raw.expect(pb.BaseCommand.SEND_RECEIPT).send_receipt

    stored = send(10, 3)
    assert (stored.sequence_id, stored.highest_sequence_id) == (10, 10)
    duplicate = send(5, None)  # below the 10 stored: answered, not stored again
    assert (duplicate.message_id.ledgerId, duplicate.message_id.entryId) == (2**64 - 1, 2**64 - 1)
    raw.close()
