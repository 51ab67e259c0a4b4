"""Delayed delivery (PIP-26) end to end with the official client.

The bar is what Pulsar users complain about: never early (not even by a tick),
not hours late, Key_Shared not stalled by a delayed key, and after a restart
neither lost nor delivered wholesale.
"""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import timedelta

import pulsar
import pytest
from polling import wait_for

SHARED = pulsar.ConsumerType.Shared
TICK_MS = 100
DELAY = timedelta(seconds=2)
BUCKET = "delayedDeliveryTrackerFactoryClassName=org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"


@pytest.fixture(params=["in-memory", "bucket"])
def tracker_config(request) -> list[str]:
    config = [f"delayedDeliveryTickTimeMillis={TICK_MS}"]
    if request.param == "bucket":
        config += [BUCKET, "delayedDeliveryMinIndexCountPerBucket=100",
                   "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds=1"]
    return config


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def receive_all(consumer: pulsar.Consumer, count: int, timeout_s: float = 15) -> list[tuple[pulsar.Message, int]]:
    """(message, arrival ms) for `count` messages, each acknowledged."""
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            continue
        got.append((msg, now_ms()))
        consumer.acknowledge(msg)
    return got


def assert_nothing_more(consumer: pulsar.Consumer, wait_ms: int = 300) -> None:
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=wait_ms)


def deliver_at(msg: pulsar.Message) -> int:
    return int(msg.properties()["at"])


def test_shared_never_early_and_within_a_tick(broker_factory, client_factory, tracker_config):
    broker = broker_factory(*tracker_config)
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-basic", "sub", consumer_type=SHARED)
    producer = client.create_producer("delay-basic")
    for i in range(20):
        at = now_ms() + 1000 + 50 * i
        producer.send(f"{i}".encode(), properties={"at": str(at)}, deliver_at=at)
    got = receive_all(consumer, 20)
    assert len(got) == 20
    for msg, arrived in got:
        assert arrived >= deliver_at(msg), "delivered before deliver_at_time"
        assert arrived - deliver_at(msg) <= TICK_MS + 400, "more than a tick (plus client slack) late"
    assert [m.data() for m, _ in got] == [f"{i}".encode() for i in range(20)]


def test_exclusive_and_failover_ignore_delay(broker, client_factory):
    client = client_factory(broker.url)
    exclusive = client.subscribe("delay-excl", "excl", consumer_type=pulsar.ConsumerType.Exclusive)
    failover = client.subscribe("delay-excl", "fail", consumer_type=pulsar.ConsumerType.Failover)
    shared = client.subscribe("delay-excl", "shared", consumer_type=SHARED)
    producer = client.create_producer("delay-excl")
    for i in range(5):
        producer.send(f"{i}".encode(), deliver_after=timedelta(seconds=30))
    for consumer in (exclusive, failover):
        assert [consumer.receive(timeout_millis=3000).data() for _ in range(5)] == [f"{i}".encode() for i in range(5)]
    assert_nothing_more(shared, 500)


def test_immediate_messages_overtake_delayed_ones(broker, client_factory):
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-mixed", "sub", consumer_type=SHARED)
    producer = client.create_producer("delay-mixed", batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(10):
        producer.send_async(f"late-{i}".encode(), None, deliver_after=DELAY)
        producer.send_async(f"now-{i}".encode(), None)
    producer.flush()
    first = [m.data() for m, _ in receive_all(consumer, 10, 1.5)]
    assert first == [f"now-{i}".encode() for i in range(10)]
    later = [m.data() for m, _ in receive_all(consumer, 10)]
    assert later == [f"late-{i}".encode() for i in range(10)]


def test_client_never_batches_delayed_messages(broker, client_factory):
    """With batching on, each delayed message is its own entry (batch index -1 or a batch of one)."""
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-batch", "sub", consumer_type=SHARED)
    producer = client.create_producer("delay-batch", batching_enabled=True, batching_max_publish_delay_ms=100)
    for i in range(10):
        producer.send_async(f"d{i}".encode(), None, deliver_after=timedelta(milliseconds=500))
    for i in range(10):
        producer.send_async(f"i{i}".encode(), None)
    producer.flush()
    got = [m for m, _ in receive_all(consumer, 20)]
    delayed = [m.message_id() for m in got if m.data().startswith(b"d")]
    immediate = [m.message_id() for m in got if m.data().startswith(b"i")]
    assert len(delayed) == 10
    assert len({(mid.ledger_id(), mid.entry_id()) for mid in delayed}) == 10, "delayed messages shared an entry"
    assert len({(mid.ledger_id(), mid.entry_id()) for mid in immediate}) < 10, "immediate ones were batched"


def test_deliver_at_in_the_past_is_immediate(broker, client_factory):
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-past", "sub", consumer_type=SHARED)
    producer = client.create_producer("delay-past")
    start = now_ms()
    producer.send(b"past", deliver_at=start - 60_000)
    msg = consumer.receive(timeout_millis=2000)
    assert msg.data() == b"past"
    assert now_ms() - start < 1000


def test_two_shared_subscriptions_have_their_own_view(broker, client_factory):
    client = client_factory(broker.url)
    first = client.subscribe("delay-two", "one", consumer_type=SHARED)
    producer = client.create_producer("delay-two")
    producer.send(b"delayed", deliver_after=DELAY)
    second = client.subscribe("delay-two", "two", consumer_type=SHARED,
                              initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"now")
    for consumer in (first, second):
        assert consumer.receive(timeout_millis=1500).data() == b"now"
    for consumer in (first, second):
        msg = consumer.receive(timeout_millis=5000)
        assert msg.data() == b"delayed"
        consumer.acknowledge(msg)
    assert_nothing_more(first)


def test_nack_of_delivered_delayed_message_redelivers_promptly(broker, client_factory):
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-nack", "sub", consumer_type=SHARED, negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer("delay-nack")
    producer.send(b"x", deliver_after=timedelta(seconds=1))
    msg = consumer.receive(timeout_millis=5000)
    consumer.negative_acknowledge(msg)
    start = now_ms()
    again = consumer.receive(timeout_millis=3000)
    assert again.data() == b"x"
    assert now_ms() - start < 1000, "a redelivered message must not be held again"
    assert again.redelivery_count() == 1
    consumer.acknowledge(again)
    assert_nothing_more(consumer)


def test_early_ack_of_delayed_message_prevents_delivery(broker, client_factory):
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-ack", "sub", consumer_type=SHARED)
    producer = client.create_producer("delay-ack")
    early = producer.send(b"acked-early", deliver_after=timedelta(seconds=1))
    producer.send(b"kept", deliver_after=timedelta(seconds=1))
    consumer.acknowledge(early)
    assert consumer.receive(timeout_millis=5000).data() == b"kept"
    assert_nothing_more(consumer, 1000)


def test_key_shared_delayed_key_does_not_stall_other_keys(broker, client_factory):
    client = client_factory(broker.url)
    consumers = [client.subscribe("delay-ks", "sub", consumer_type=pulsar.ConsumerType.KeyShared,
                                  consumer_name=f"c{i}") for i in range(2)]
    producer = client.create_producer("delay-ks", batching_enabled=False)
    for i in range(5):
        producer.send(f"slow-{i}".encode(), partition_key="slow", deliver_after=timedelta(seconds=3))
    for i in range(20):
        producer.send(f"fast-{i}".encode(), partition_key=f"k{i % 4}")
    deadline = time.monotonic() + 2
    fast = []
    while len(fast) < 20 and time.monotonic() < deadline:
        for consumer in consumers:
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            fast.append(msg.data())
            consumer.acknowledge(msg)
    assert sorted(fast) == sorted(f"fast-{i}".encode() for i in range(20))
    slow = []
    deadline = time.monotonic() + 6
    while len(slow) < 5 and time.monotonic() < deadline:
        for consumer in consumers:
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            slow.append(msg.data())
            consumer.acknowledge(msg)
    assert slow == [f"slow-{i}".encode() for i in range(5)], "one key, one consumer, in order"


def test_stats_count_delayed_not_available(broker, client_factory):
    client = client_factory(broker.url)
    client.subscribe("delay-stats", "sub", consumer_type=SHARED)
    producer = client.create_producer("delay-stats")
    for _ in range(3):
        producer.send(b"d", deliver_after=timedelta(seconds=30))
    producer.send(b"now")

    def sub_stats() -> dict:
        url = f"{broker.admin_url}/admin/v2/persistent/public/default/delay-stats/stats"
        with urllib.request.urlopen(url) as response:
            return json.load(response)["subscriptions"]["sub"]
    # the dispatcher reads the entries into its tracker shortly after they are stored
    assert wait_for(lambda: sub_stats()["msgDelayed"] == 3), sub_stats()
    stats = sub_stats()
    assert stats["msgBacklogNoDelayed"] == stats["msgBacklog"] - 3


def test_restart_with_thousands_pending(broker_factory, client_factory, tracker_config):
    broker = broker_factory(*tracker_config)
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-restart", "sub", consumer_type=SHARED, receiver_queue_size=1000)
    producer = client.create_producer("delay-restart", batching_enabled=False, max_pending_messages=5000)
    count = 3000
    base = now_ms() + 6000
    for i in range(count):
        at = base + (i % 30) * 100
        producer.send_async(f"{i}".encode(), None, properties={"at": str(at)}, deliver_at=at)
        if i % 3 == 0:  # interleaved messages not due for an hour must stay held after the restart
            producer.send_async(b"far", None, deliver_after=timedelta(hours=1))
    producer.flush()
    for i in range(200):
        producer.send_async(f"now-{i}".encode(), None)
    producer.flush()
    assert len(receive_all(consumer, 200, 10)) == 200
    client.close()
    broker.restart()
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-restart", "sub", consumer_type=SHARED, receiver_queue_size=1000)
    got = receive_all(consumer, count, 30)
    payloads = [m.data() for m, _ in got]
    assert b"far" not in payloads
    assert len(payloads) == len(set(payloads)) == count, "lost or duplicated"
    early = [m.data() for m, arrived in got if arrived < deliver_at(m)]
    assert not early, f"{len(early)} delivered early"
    assert_nothing_more(consumer, 1000)


def test_delivered_but_unacked_delayed_messages_come_back_once_after_restart(broker_factory, client_factory,
                                                                              tracker_config):
    broker = broker_factory(*tracker_config)
    client = client_factory(broker.url)
    consumer = client.subscribe("delay-unacked", "sub", consumer_type=SHARED)
    producer = client.create_producer("delay-unacked", batching_enabled=False)
    for i in range(50):
        producer.send_async(f"{i}".encode(), None, deliver_after=timedelta(seconds=1))
        producer.send_async(b"far", None, deliver_after=timedelta(hours=1))
    producer.flush()
    first = [consumer.receive(timeout_millis=5000).data() for _ in range(50)]  # not acknowledged
    assert sorted(first) == sorted(f"{i}".encode() for i in range(50))
    client.close()
    broker.restart()
    consumer = client_factory(broker.url).subscribe("delay-unacked", "sub", consumer_type=SHARED)
    again = [m.data() for m, _ in receive_all(consumer, 50, 10)]
    assert sorted(again) == sorted(first)
    assert_nothing_more(consumer, 1000)
