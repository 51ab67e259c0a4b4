"""Delivery rules of each subscription type, with several consumers."""

from __future__ import annotations

import time
from collections import defaultdict

import pulsar
import pytest

EARLIEST = pulsar.InitialPosition.Earliest


def receive_all(consumers, expected: int, deadline_s: float = 15.0) -> dict[str, list[pulsar.Message]]:
    """Poll every consumer until `expected` messages arrived in total (or the deadline)."""
    got: dict[str, list[pulsar.Message]] = defaultdict(list)
    end = time.monotonic() + deadline_s
    total = 0
    while total < expected and time.monotonic() < end:
        for name, consumer in consumers.items():
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            consumer.acknowledge(msg)
            got[name].append(msg)
            total += 1
    return got


def test_exclusive_refuses_second_consumer(client):
    client.subscribe("excl", "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe("excl", "sub", consumer_type=pulsar.ConsumerType.Exclusive)


def test_subscription_type_cannot_change_while_consumers_connected(client):
    client.subscribe("mixed", "sub", consumer_type=pulsar.ConsumerType.Shared)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe("mixed", "sub", consumer_type=pulsar.ConsumerType.Failover)


def test_shared_spreads_messages_over_consumers(client):
    topic = "shared-spread"
    consumers = {
        name: client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, consumer_name=name,
                               receiver_queue_size=10)
        for name in ("a", "b")
    }
    producer = client.create_producer(topic)
    for i in range(100):
        producer.send(f"m{i}".encode())
    got = receive_all(consumers, 100)
    assert sorted(m.data() for msgs in got.values() for m in msgs) == sorted(f"m{i}".encode() for i in range(100))
    assert len(got["a"]) > 0 and len(got["b"]) > 0


def test_failover_delivers_to_one_active_consumer(client):
    topic = "failover-one"
    consumers = {
        name: client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name=name)
        for name in ("a", "b")
    }
    producer = client.create_producer(topic)
    for i in range(20):
        producer.send(f"m{i}".encode())
    got = receive_all(consumers, 20)
    assert [m.data() for m in got["a"]] == [f"m{i}".encode() for i in range(20)]
    assert "b" not in got


def test_failover_switches_to_standby_on_close(client):
    topic = "failover-switch"
    active = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    standby = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic)
    producer.send(b"first")
    first = active.receive(timeout_millis=10000)
    assert first.data() == b"first"  # received, never acknowledged
    active.close()
    producer.send(b"second")
    assert [standby.receive(timeout_millis=10000).data() for _ in range(2)] == [b"first", b"second"]


def test_key_shared_keeps_each_key_on_one_consumer_in_order(client):
    topic = "key-shared"
    consumers = {
        name: client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name)
        for name in ("a", "b", "c")
    }
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(12)]
    for i in range(240):
        producer.send(f"{i}".encode(), partition_key=keys[i % len(keys)])
    got = receive_all(consumers, 240)
    owners: dict[str, set[str]] = defaultdict(set)
    per_key: dict[str, list[int]] = defaultdict(list)
    for name, msgs in got.items():
        for m in msgs:
            owners[m.partition_key()].add(name)
            per_key[m.partition_key()].append(int(m.data()))
    assert sum(len(v) for v in per_key.values()) == 240
    assert all(len(o) == 1 for o in owners.values()), owners
    assert all(seq == sorted(seq) for seq in per_key.values())
    assert len({next(iter(o)) for o in owners.values()}) > 1  # keys are spread


def test_slow_consumer_holds_back_only_itself(client):
    """FLOW permits: a consumer that stops receiving does not stall another subscription."""
    topic = "slow-consumer"
    slow = client.subscribe(topic, "slow", receiver_queue_size=5, initial_position=EARLIEST)
    fast = client.subscribe(topic, "fast", initial_position=EARLIEST)
    producer = client.create_producer(topic)
    for i in range(200):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()
    assert [fast.receive(timeout_millis=10000).data() for _ in range(200)] == [f"{i}".encode() for i in range(200)]
    assert slow.receive(timeout_millis=10000).data() == b"0"
