"""Inactive topics and idle subscriptions go away under Pulsar's keys, and only then."""

from __future__ import annotations

from admin_http import get_json
from polling import wait_for

BASE = "/admin/v2/persistent/public/default"
INACTIVE = ("brokerDeleteInactiveTopicsEnabled=true", "brokerDeleteInactiveTopicsFrequencySeconds=1",
            "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds=1")


def topics(broker) -> list[str]:
    return get_json(f"{broker.admin_url}{BASE}")


def test_inactive_topics_without_subscriptions_are_deleted(broker_factory, client_factory):
    broker = broker_factory(*INACTIVE)
    client = client_factory(broker.url)
    for topic in ("idle", "subscribed"):
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"x")
        producer.close()
    client.subscribe("subscribed", "sub").close()
    kept_busy = client.create_producer("busy")
    assert wait_for(lambda: "persistent://public/default/idle" not in topics(broker))
    listed = topics(broker)
    assert "persistent://public/default/subscribed" in listed  # it has a subscription
    assert "persistent://public/default/busy" in listed  # it has a producer
    kept_busy.send(b"still here")


def test_caught_up_mode_deletes_when_every_subscription_read_everything(broker_factory, client_factory):
    broker = broker_factory(*INACTIVE, "brokerDeleteInactiveTopicsMode=delete_when_subscriptions_caught_up")
    client = client_factory(broker.url)
    consumer = client.subscribe("caught-up", "sub")
    client.subscribe("behind", "sub").close()
    for topic in ("caught-up", "behind"):
        producer = client.create_producer(topic)
        producer.send(b"x")
        producer.close()
    consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()
    assert wait_for(lambda: "persistent://public/default/caught-up" not in topics(broker))
    assert "persistent://public/default/behind" in topics(broker)


def test_off_by_default(broker, client_factory):
    client_factory(broker.url).create_producer("kept", batching_enabled=False).send(b"x")
    broker.restart()
    assert topics(broker) == ["persistent://public/default/kept"]


def test_idle_subscriptions_expire(broker_factory, client_factory):
    broker = broker_factory("subscriptionExpirationTimeMinutes=0.02", "subscriptionExpiryCheckIntervalInMinutes=0.01")
    client = client_factory(broker.url)
    client.subscribe("expiring", "idle").close()
    active = client.subscribe("expiring", "active")
    subscriptions = f"{broker.admin_url}{BASE}/expiring/subscriptions"
    assert sorted(get_json(subscriptions)) == ["active", "idle"]
    assert wait_for(lambda: get_json(subscriptions) == ["active"])
    active.close()
