"""Redelivery paths with both clients: unacked timeout, dead-letter topics, chunked messages."""

from __future__ import annotations

import random

import pulsar
import pytest

import magnetar.client as ours
from magnetar.client.schema import KeyValue, KeyValueEncodingType, KeyValueSchema, LongSchema, StringSchema

EARLY = 10_000


def _dead_letter_policy(api, **kwargs):
    return api.module.ConsumerDeadLetterPolicy(**kwargs)


def test_unacked_messages_come_back_after_the_timeout(api, topic):
    client = api.client()
    with pytest.raises(ValueError, match="10 seconds"):
        client.subscribe(topic, "sub", unacked_messages_timeout_ms=9999)
    consumer = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared,
                                unacked_messages_timeout_ms=10_000)
    client.create_producer(topic).send(b"forgotten")
    first = consumer.receive(EARLY)
    again = consumer.receive(2 * EARLY)  # not acked: redelivered after 10 to 11 seconds
    assert (again.data(), again.redelivery_count()) == (b"forgotten", 1)
    assert str(again.message_id()) == str(first.message_id())
    consumer.acknowledge(again)


def test_dead_letter_topic_after_max_redeliveries(api, topic):
    client = api.client()
    dlq_consumer = client.subscribe(f"{topic}-sub-DLQ", "dlq-reader")
    consumer = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100,
                                dead_letter_policy=_dead_letter_policy(api, max_redeliver_count=2))
    client.create_producer(topic).send(b"poison", properties={"p": "1"})
    counts = []
    for _ in range(3):  # first delivery and two redeliveries
        msg = consumer.receive(EARLY)
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]
    dead = dlq_consumer.receive(EARLY)
    assert dead.data() == b"poison"
    assert dead.properties()["p"] == "1"
    assert dead.properties()["REAL_TOPIC"] == topic
    with pytest.raises(api.module.Timeout):
        consumer.receive(500)


@pytest.mark.parametrize("producing", ["official", "magnetar"])
def test_chunked_messages_between_clients(api, broker_factory, producing):
    broker = broker_factory("maxMessageSize=10000")
    api.url = broker.url
    consuming_client = api.client()
    module = pulsar if producing == "official" else ours
    kwargs = {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)} if module is pulsar else {}
    producing_client = module.Client(broker.url, operation_timeout_seconds=10, **kwargs)
    try:
        topic = "persistent://public/default/chunked"
        consumer = consuming_client.subscribe(topic, "sub")
        producer = producing_client.create_producer(topic, chunking_enabled=True,
                                                    compression_type=module.CompressionType.LZ4)
        big = bytes(range(256)) * 200  # 51200 bytes, barely compressible
        sent = producer.send(big, properties={"k": "v"})
        producer.send(b"small")
        got = consumer.receive(EARLY)
        assert got.data() == big and got.properties() == {"k": "v"}
        assert (got.message_id().ledger_id(), got.message_id().entry_id()) == (sent.ledger_id(), sent.entry_id())
        consumer.acknowledge(got)
        assert consumer.receive(EARLY).data() == b"small"
    finally:
        producing_client.close()


def test_retry_letter_topic_then_dead_letter(shared_broker, topic):
    """The Java client's reconsumeLater, which the official Python client lacks."""
    client = ours.Client(shared_broker.service_url, operation_timeout_seconds=10)
    try:
        dlq = client.subscribe(f"{topic}-sub-DLQ", "dlq-reader")
        consumer = client.subscribe(topic, "sub", consumer_type=ours.ConsumerType.Shared, retry_enable=True,
                                    dead_letter_policy=ours.ConsumerDeadLetterPolicy(max_redeliver_count=2))
        client.create_producer(topic).send(b"try again", properties={"p": "1"}, partition_key="k")
        msg = consumer.receive(EARLY)
        times = []
        for _ in range(3):
            consumer.reconsume_later(msg, 200)
            if len(times) == 2:
                break
            msg = consumer.receive(EARLY)
            times.append(msg.properties()["RECONSUMETIMES"])
            assert msg.topic_name() == f"{topic}-sub-RETRY"
            assert msg.properties()["REAL_TOPIC"] == topic and msg.properties()["p"] == "1"
            assert msg.partition_key() == "k"
        assert times == ["1", "2"]
        dead = dlq.receive(EARLY)
        assert dead.data() == b"try again" and dead.properties()["RECONSUMETIMES"] == "3"
        with pytest.raises(ours.Timeout):
            consumer.receive(500)
    finally:
        client.close()


def _key_values(rng: random.Random, count: int) -> list[tuple[KeyValue, bytes | None]]:
    """Distinct SEPARATED KeyValues (None keys and values among them), each with an ordering key or none."""
    return [(KeyValue(rng.choice([None, rng.randint(-2**63, 2**63 - 1)]), rng.choice([None, f"v{i}-ünï"])),
             rng.choice([None, rng.randbytes(4)])) for i in range(count)]


def _send_all(producer, sent: list[tuple[KeyValue, bytes | None]]) -> None:
    for value, ordering_key in sent:
        producer.send_async(value, None, **({} if ordering_key is None else {"ordering_key": ordering_key}))
    producer.flush()


def _records(messages) -> list[tuple[KeyValue, bytes | None]]:
    return sorted(((message.value(), message.ordering_key() or None) for message in messages), key=repr)


def test_letters_keep_separated_keys_and_ordering_keys(shared_broker, topic):
    """A SEPARATED KeyValue's key is bytes (base64 with partition_key_b64_encoded) or null
    (null_partition_key): dead and retry letters carry both flags and the ordering key, as
    the Java client's letters do, so the letter topics decode to the same records."""
    schema = KeyValueSchema(LongSchema(), StringSchema(), KeyValueEncodingType.SEPARATED)
    sent = _key_values(random.Random(), 12)
    client = ours.Client(shared_broker.service_url, operation_timeout_seconds=10)
    try:
        dlq = client.subscribe(f"{topic}-sub-DLQ", "dlq-reader", schema=schema)
        consumer = client.subscribe(topic, "sub", consumer_type=ours.ConsumerType.Shared, schema=schema,
                                    negative_ack_redelivery_delay_ms=100, retry_enable=True,
                                    dead_letter_policy=ours.ConsumerDeadLetterPolicy(max_redeliver_count=1))
        producer = client.create_producer(topic, schema=schema, batching_enabled=True)
        _send_all(producer, sent)
        for _ in range(2 * len(sent)):  # first deliveries, then the redeliveries past max_redeliver_count
            consumer.negative_acknowledge(consumer.receive(EARLY))
        assert _records(dlq.receive(EARLY) for _ in sent) == sorted(sent, key=repr)

        _send_all(producer, sent)
        for _ in sent:
            consumer.reconsume_later(consumer.receive(EARLY), 100)
        retried = [consumer.receive(EARLY) for _ in sent]
        assert {message.topic_name() for message in retried} == {f"{topic}-sub-RETRY"}
        assert _records(retried) == sorted(sent, key=repr)
    finally:
        client.close()


def test_acks_while_a_nack_waits_take_effect_without_waking_the_loop_per_ack(api, topic):
    """While a negative ack waits and the unacked timeout runs, every ack must also reach the
    redelivery state: only the nacked message comes back, and the acked ones neither come back
    nor stay in the backlog. magnetar.client's application-thread acks reach it without a
    hop to the event loop each (they once cost a loop wake-up per message)."""
    rng = random.Random()
    client = api.client()
    consumer = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=300, unacked_messages_timeout_ms=10_000)
    producer = client.create_producer(topic, batching_enabled=False)
    count = rng.randrange(100, 300)
    for index in range(count):
        producer.send_async(b"%d" % index, None)
    producer.flush()
    received = [consumer.receive(EARLY) for _ in range(count)]
    nacked = received.pop(rng.randrange(count))
    consumer.negative_acknowledge(nacked)
    rng.shuffle(received)
    hops = [0]
    if api.module is ours:
        loop = client._io.loop
        hop = loop.call_soon_threadsafe

        def counted(*args, **kwargs):
            hops[0] += 1
            return hop(*args, **kwargs)

        loop.call_soon_threadsafe = counted
    for message in received:
        consumer.acknowledge(message)
    hops_for_acks = hops[0]
    again = consumer.receive(EARLY)
    assert (again.data(), again.redelivery_count()) == (nacked.data(), 1)
    consumer.acknowledge(again)
    with pytest.raises(api.module.Timeout):
        consumer.receive(1000)  # nothing acked comes back
    consumer.close()
    if api.module is ours:
        assert hops_for_acks <= 2  # a permits top-up at most, not one per ack
    backlog = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared)
    with pytest.raises(api.module.Timeout):
        backlog.receive(500)  # every ack reached the broker
