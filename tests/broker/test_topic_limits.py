"""Limits a namespace or topic may set (producers, consumers, unacknowledged messages per
consumer), delayed delivery on or off and subscription expiration by policy, each through
the admin API at Pulsar's paths and enforced on the official client."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pulsar
import pytest
from admin_http import get_json, http
from polling import wait_for

NAMESPACE = "/admin/v2/namespaces/public/default"
TOPICS = "/admin/v2/persistent/public/default"


def set_policy(broker, path: str, value: object, method: str = "POST") -> int:
    return http(method, f"{broker.admin_url}{path}", json.dumps(value).encode())[0]


def name() -> str:
    return f"limits-{uuid.uuid4().hex[:8]}"


def receive_all(consumer, timeout_ms: int = 500) -> list:
    got = []
    while True:
        try:
            got.append(consumer.receive(timeout_ms))
        except pulsar.Timeout:
            return got


def test_max_producers_namespace_then_topic(broker, client_factory):
    client = client_factory(broker.url)
    topic = name()
    assert set_policy(broker, f"{NAMESPACE}/maxProducersPerTopic", 1) == 204
    assert get_json(f"{broker.admin_url}{NAMESPACE}/maxProducersPerTopic") == 1
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    assert set_policy(broker, f"{TOPICS}/{topic}/maxProducers", 2) == 204  # the topic's policy wins
    second = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    client.create_producer(topic)  # a place came free
    second.send(b"still works")
    assert http("DELETE", f"{broker.admin_url}{NAMESPACE}/maxProducersPerTopic")[0] == 204


def test_max_consumers_per_subscription_and_topic(broker, client_factory):
    client = client_factory(broker.url)
    topic = name()
    assert set_policy(broker, f"{TOPICS}/{topic}/maxConsumersPerSubscription", 2) == 204
    shared = pulsar.ConsumerType.Shared
    consumers = [client.subscribe(topic, "s", consumer_type=shared) for _ in range(2)]
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "s", consumer_type=shared)
    assert set_policy(broker, f"{TOPICS}/{topic}/maxConsumers", 3) == 204
    consumers.append(client.subscribe(topic, "other", consumer_type=shared))
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "third", consumer_type=shared)
    consumers[0].close()
    client.subscribe(topic, "third", consumer_type=shared)


def test_a_shared_consumer_is_blocked_at_its_unacked_limit(broker_factory, client_factory):
    broker = broker_factory("maxUnackedMessagesPerConsumer=10")
    client = client_factory(broker.url)
    topic = name()
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=100)
    exclusive = client.subscribe(topic, "x", receiver_queue_size=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(str(i).encode())
    held = receive_all(consumer)
    assert len(held) == 10  # the limit, then nothing more until acknowledgements come
    stats = get_json(f"{broker.admin_url}{TOPICS}/{topic}/stats")["subscriptions"]
    assert stats["s"]["consumers"][0]["blockedConsumerOnUnackedMsgs"] is True
    assert stats["s"]["consumers"][0]["unackedMessages"] == 10
    assert len(receive_all(exclusive)) == 40  # cumulative-ack subscriptions are not held to it
    for message in held[:4]:
        consumer.acknowledge(message)
    assert receive_all(consumer, 300) == []  # 6 unacked: above half the limit, still blocked
    consumer.acknowledge(held[4])
    more = receive_all(consumer)  # 5 unacked: unblocked, and blocked again at 10
    assert len(more) == 5
    for message in held[5:] + more:
        consumer.acknowledge(message)
    rest = receive_all(consumer)
    assert [int(m.data()) for m in held + more + rest][:20] == list(range(20))
    # the namespace policy overrides the broker key
    assert set_policy(broker, f"{NAMESPACE}/maxUnackedMessagesPerConsumer", 0) == 204
    fresh = client.subscribe(name(), "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(fresh.topic(), batching_enabled=False)
    for i in range(30):
        producer.send(str(i).encode())
    assert len(receive_all(fresh)) == 30


def test_delayed_delivery_policy_turns_it_off(broker, client_factory):
    client = client_factory(broker.url)
    topic = name()
    body = {"active": False, "tickTime": 1000}
    assert set_policy(broker, f"{TOPICS}/{topic}/delayedDelivery", body) == 204
    assert get_json(f"{broker.admin_url}{TOPICS}/{topic}/delayedDelivery") == {**body, "maxDeliveryDelayInMillis": 0}
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"later", deliver_after=timedelta(hours=1))
    assert consumer.receive(5000).data() == b"later"  # delivered at once: the policy turned it off


def test_subscription_expiration_by_namespace_policy(broker_factory, client_factory):
    broker = broker_factory("subscriptionExpiryCheckIntervalInMinutes=0.01")
    client = client_factory(broker.url)
    topic = name()
    client.subscribe(topic, "idle").close()
    assert set_policy(broker, f"{NAMESPACE}/subscriptionExpirationTime", 0.02) == 204
    assert wait_for(lambda: get_json(f"{broker.admin_url}{TOPICS}/{topic}/subscriptions") == [])


@pytest.mark.parametrize(("path", "value"), [
    (f"{NAMESPACE}/maxProducersPerTopic", -1),
    (f"{NAMESPACE}/maxUnackedMessagesPerConsumer", "many"),
    (f"{NAMESPACE}/delayedDelivery", {"tickTime": 5}),
    (f"{NAMESPACE}/delayedDelivery", {"active": True, "tickTime": -5}),
    (f"{NAMESPACE}/schemaCompatibilityStrategy", "SOMETIMES"),
    (f"{NAMESPACE}/subscriptionExpirationTime", -3),
])
def test_bad_policy_values_are_refused(broker, path, value):
    status, _, body = http("POST", f"{broker.admin_url}{path}", json.dumps(value).encode())
    assert status == 412 and "Invalid value" in json.loads(body)["reason"]


def test_schema_compatibility_strategy_is_stored(broker):
    assert set_policy(broker, f"{NAMESPACE}/schemaCompatibilityStrategy", "BACKWARD", method="PUT") == 204
    assert get_json(f"{broker.admin_url}{NAMESPACE}/schemaCompatibilityStrategy") == "BACKWARD"
    assert get_json(f"{broker.admin_url}{NAMESPACE}")["schema_compatibility_strategy"] == "BACKWARD"
