"""Backlog quotas with the official client: producers held or failed, or old messages evicted."""

from __future__ import annotations

import json

import pulsar
import pytest
from admin_http import get_json, http
from polling import wait_for

BASE = "/admin/v2/persistent/public/default"
CHECK_EVERY_SECOND = "backlogQuotaCheckIntervalInSeconds=1"


def set_quota(broker, topic: str, kind: str = "destination_storage", **quota) -> None:
    url = f"{broker.admin_url}{BASE}/{topic}/backlogQuota?backlogQuotaType={kind}"
    assert http("POST", url, json.dumps(quota).encode())[0] == 204


def backlog(broker, topic: str) -> tuple[int, int]:
    stats = get_json(f"{broker.admin_url}{BASE}/{topic}/stats")
    return stats["subscriptions"]["slow"]["msgBacklog"], stats["backlogSize"]


def publishers(broker, topic: str) -> list[dict]:
    return get_json(f"{broker.admin_url}{BASE}/{topic}/stats")["publishers"]


def fill(client, topic: str, count: int = 20) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(count):
        producer.send(b"x" * 200)
    producer.close()


@pytest.mark.parametrize(("policy", "error"), [
    ("producer_exception", pulsar.ProducerBlockedQuotaExceededException),
    ("producer_request_hold", pulsar.ProducerBlockedQuotaExceededError),
])
def test_producers_are_refused_over_the_quota(broker_factory, client_factory, policy, error):
    broker = broker_factory(CHECK_EVERY_SECOND)
    client = client_factory(broker.url, operation_timeout_seconds=5)
    topic = f"quota-{policy}"
    client.subscribe(topic, "slow").close()
    fill(client, topic)
    assert backlog(broker, topic)[1] > 1000
    set_quota(broker, topic, limitSize=1000, limitTime=-1, policy=policy)
    with pytest.raises(error):
        client.create_producer(topic)
    assert http("POST", f"{broker.admin_url}{BASE}/{topic}/subscription/slow/skip_all")[0] == 204
    client.create_producer(topic).send(b"room again")


def test_connected_producer_is_failed_when_the_quota_is_exceeded(broker_factory, client_factory):
    """A producer connected before its topic went over the quota is closed by the next check
    and refused on its return: its next send fails with the quota's error, a new producer is
    refused, and nothing more is stored.

    Deterministic under load: the backlog is stored before the quota is set, the test waits
    for the close (no send races the check), and sends have no timeout to mistake for it."""
    broker = broker_factory(CHECK_EVERY_SECOND)
    client = client_factory(broker.url, operation_timeout_seconds=5)
    client.subscribe("quota-live", "slow").close()
    producer = client.create_producer("quota-live", batching_enabled=False, send_timeout_millis=0)
    for _ in range(10):
        producer.send(b"x" * 200)
    assert backlog(broker, "quota-live")[0] == 10
    set_quota(broker, "quota-live", limitSize=1000, limitTime=-1, policy="producer_exception")
    assert wait_for(lambda: not publishers(broker, "quota-live") and not producer.is_connected()), \
        "the producer was never closed"
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        producer.send(b"x" * 200)  # pending until the client's next attempt to return is refused
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer("quota-live")
    assert backlog(broker, "quota-live")[0] == 10


def test_consumer_backlog_eviction_by_size_and_age(broker_factory, client_factory):
    broker = broker_factory(CHECK_EVERY_SECOND)
    client = client_factory(broker.url)
    for topic in ("evict-size", "evict-age"):
        client.subscribe(topic, "slow").close()
        fill(client, topic)
    set_quota(broker, "evict-size", limitSize=1000, limitTime=-1, policy="consumer_backlog_eviction")
    set_quota(broker, "evict-age", "message_age", limitSize=-1, limitTime=1, policy="consumer_backlog_eviction")
    assert wait_for(lambda: backlog(broker, "evict-size")[1] <= 1000), backlog(broker, "evict-size")
    assert backlog(broker, "evict-size")[0] > 0  # only the oldest went
    assert wait_for(lambda: backlog(broker, "evict-age")[0] == 0), backlog(broker, "evict-age")
    consumer = client.subscribe("evict-size", "slow")
    consumer.receive(timeout_millis=10_000)  # what is left is still delivered


def test_namespace_quota_and_broker_default(broker_factory, client_factory):
    broker = broker_factory(CHECK_EVERY_SECOND, "backlogQuotaDefaultLimitBytes=1000",
                            "backlogQuotaDefaultRetentionPolicy=producer_exception")
    client = client_factory(broker.url, operation_timeout_seconds=5)
    client.subscribe("default-quota", "slow").close()
    fill(client, "default-quota")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer("default-quota")
    url = f"{broker.admin_url}/admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=destination_storage"
    assert http("POST", url, json.dumps({"limitSize": 10**9, "policy": "producer_exception"}).encode())[0] == 204
    assert get_json(f"{broker.admin_url}/admin/v2/namespaces/public/default/backlogQuotaMap")[
        "destination_storage"]["limitSize"] == 10**9
    client.create_producer("default-quota").send(b"the namespace allows more")
    bad = http("POST", url, json.dumps({"limitSize": 5, "policy": "drop_everything"}).encode())
    assert bad[0] == 412
