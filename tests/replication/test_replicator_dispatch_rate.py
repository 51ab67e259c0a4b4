"""The replicator dispatch rate (Pulsar's `replicatorDispatchRate` of a topic or namespace,
else broker.conf's dispatchThrottlingRatePerReplicator*): each replicator sends at most that
many messages a period, and nothing is lost for it.

Rates are held to a generous upper band only (what arrives after the first message within
`elapsed` seconds is at most 1.5 x rate x elapsed plus one bucket), which a loaded machine can
only make easier to meet; unlimited, the same messages arrive many times faster than the band."""

from __future__ import annotations

import json
import random
import time

import pytest
from admin_http import http

from magnetar.admin_client import AdminClient

RATE = 40
COUNT = 160


def east_to_west(broker_factory, *east_config: str) -> dict:
    brokers = {"east": broker_factory("clusterName=east", *east_config), "west": broker_factory("clusterName=west")}
    for name, broker in brokers.items():
        admin = AdminClient(broker.admin_url)
        other = "west" if name == "east" else "east"
        admin.create_cluster(other, {"serviceUrl": brokers[other].admin_url, "brokerServiceUrl": brokers[other].url})
        admin.update_tenant("public", [], ["east", "west"])
        admin.set_replication_clusters("public/default", ["east", "west"])
    return brokers


def rate(messages: int, period: int = 1) -> dict:
    return {"dispatchThrottlingRateInMsg": messages, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": period}


@pytest.mark.parametrize("where", ["topic over namespace", "broker.conf"])
def test_each_replicator_sends_at_most_its_rate_and_loses_nothing(broker_factory, client_factory, where):
    """The topic's rate (RATE a second) wins over its namespace's (100 times more); or, with no
    policy, broker.conf's. The producer is not slowed: only the replicator is."""
    config = [f"dispatchThrottlingRatePerReplicatorInMsg={RATE}"] if where == "broker.conf" else []
    brokers = east_to_west(broker_factory, *config)
    topic = f"persistent://public/default/rated-{random.randrange(1 << 30)}"
    consumer = client_factory(brokers["west"].url).subscribe(topic, "sub")
    producer = client_factory(brokers["east"].url).create_producer(topic, batching_enabled=False)
    if where != "broker.conf":
        admin = AdminClient(brokers["east"].admin_url)
        admin.set_namespace_policy("public/default", "replicatorDispatchRate", rate(100 * RATE))
        admin.set_topic_policy(topic, "replicatorDispatchRate", rate(2 * RATE, 2))
    for i in range(COUNT):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    got = [consumer.receive(timeout_millis=30_000)]
    first = time.monotonic()
    while len(got) < COUNT:
        got.append(consumer.receive(timeout_millis=30_000))
    elapsed = time.monotonic() - first
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(COUNT)]
    assert 1.5 * RATE * elapsed + RATE >= COUNT - 1, f"{COUNT - 1} messages in {elapsed:.2f} s"


def test_the_policy_is_refused_when_malformed(broker):
    """Pulsar's DispatchRate JSON, each field checked; a rate relative to the publish rate is
    not applied, so it is refused."""
    base = f"{broker.admin_url}/admin/v2/namespaces/public/default/replicatorDispatchRate"
    for body, field in ((rate(-2), "dispatchThrottlingRateInMsg"), (rate(5, 0), "ratePeriodInSecond"),
                        ({**rate(5), "relativeToPublishRate": True}, "relativeToPublishRate"),
                        ({**rate(5), "dispatchThrottlingRateInByte": "many"}, "dispatchThrottlingRateInByte")):
        status, _, answer = http("POST", base, json.dumps(body).encode())
        assert status == 412 and field.encode() in answer, (body, status, answer)
