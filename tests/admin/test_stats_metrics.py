"""Topic stats and /metrics tell the truth: every message counted, every topic shown."""

from __future__ import annotations

import json
import re
import time

import pulsar
from admin_http import get_json, http, http_get
from polling import wait_for

EARLIEST = pulsar.InitialPosition.Earliest
BASE = "/admin/v2/persistent/public/default"


def stats(broker, topic: str) -> dict:
    return get_json(f"{broker.admin_url}{BASE}/{topic}/stats")


def metrics(broker) -> str:
    status, _, body = http_get(f"{broker.admin_url}/metrics")
    assert status == 200
    return body.decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample `name` whose labels include `labels`."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.rindex("}")]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_in_counters_count_producers_that_left(broker, client_factory):
    client = client_factory(broker.url)
    consumer = client.subscribe("counted", "sub", initial_position=EARLIEST)
    first = client.create_producer("counted", batching_enabled=False)
    for _ in range(10):
        first.send(b"x" * 100)
    first.close()
    second = client.create_producer("counted")  # batching: 5 messages in one entry
    for _ in range(5):
        second.send_async(b"y" * 100, None)
    second.flush()
    got = stats(broker, "counted")
    assert got["msgInCounter"] == 15
    assert got["bytesInCounter"] >= 15 * 100
    assert [p["accessMode"] for p in got["publishers"]] == ["Shared"]
    for _ in range(15):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    got = stats(broker, "counted")
    assert got["msgOutCounter"] == 15
    assert got["subscriptions"]["sub"]["msgOutCounter"] == 15
    assert got["bytesOutCounter"] >= 15 * 100


def test_rates_follow_traffic(broker_factory, client_factory):
    broker = broker_factory("statsUpdateFrequencyInSecs=1")
    client = client_factory(broker.url)
    consumer = client.subscribe("rated", "sub")
    producer = client.create_producer("rated", batching_enabled=False)
    deadline = time.monotonic() + 15
    while True:
        for _ in range(20):
            producer.send(b"z" * 50)
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        got = stats(broker, "rated")
        if got["msgRateIn"] > 0 and got["subscriptions"]["sub"]["msgRateOut"] > 0:
            break
        assert time.monotonic() < deadline, got
    assert got["msgThroughputIn"] >= got["msgRateIn"] * 50
    text = metrics(broker)
    assert sample(text, "pulsar_rate_in", topic="persistent://public/default/rated") > 0
    assert sample(text, "pulsar_throughput_out", topic="persistent://public/default/rated") > 0


def test_metrics_cover_unloaded_topics_right_after_restart(broker, client_factory):
    client = client_factory(broker.url)
    client.subscribe("backlogged", "sub", initial_position=EARLIEST, consumer_type=pulsar.ConsumerType.Shared).close()
    producer = client.create_producer("backlogged", batching_enabled=False)
    for _ in range(7):
        producer.send(b"w")
    client.create_producer("just-data", batching_enabled=False).send(b"v")
    client.close()
    broker.restart()

    topic = "persistent://public/default/backlogged"
    text = metrics(broker)  # nothing has touched either topic since the restart
    assert sample(text, "pulsar_msg_backlog", topic=topic) == 7
    assert sample(text, "pulsar_subscription_back_log", topic=topic, subscription="sub") == 7
    assert sample(text, "pulsar_storage_size", topic=topic) > 0
    assert sample(text, "pulsar_storage_size", topic="persistent://public/default/just-data") > 0
    assert sample(text, "pulsar_subscriptions_count", topic=topic) == 1
    assert sample(text, "pulsar_in_messages_total", topic=topic) == 0  # counted since the topic loaded
    for family in ("pulsar_msg_backlog", "pulsar_storage_size", "pulsar_in_messages_total", "pulsar_in_bytes_total",
                   "pulsar_out_messages_total", "pulsar_rate_in", "pulsar_subscription_back_log"):
        assert f"# HELP {family} " in text, family
        assert f"# TYPE {family} " in text, family
    assert sample(text, "pulsar_msg_backlog", cluster="standalone", namespace="public/default", topic=topic) == 7


def test_subscription_type_survives_restart(broker, client_factory):
    client = client_factory(broker.url)
    for name, kind in (("shared", pulsar.ConsumerType.Shared), ("failover", pulsar.ConsumerType.Failover),
                       ("key-shared", pulsar.ConsumerType.KeyShared)):
        client.subscribe("typed", name, consumer_type=kind).close()
    client.close()
    broker.restart()
    subscriptions = stats(broker, "typed")["subscriptions"]
    assert {name: sub["type"] for name, sub in subscriptions.items()} == {
        "shared": "Shared", "failover": "Failover", "key-shared": "Key_Shared"}


_SAMPLE_LINE = re.compile(r'^[a-z_][a-z0-9_]*\{(?:[a-z_]+="(?:\\.|[^"\\\n])*",?)*\} [-+0-9.e]+$')


def test_label_values_cannot_inject_lines(broker, client_factory):
    """A topic name full of exposition syntax stays inside its label value."""
    client = client_factory(broker.url)
    hostile = 'x"} 1 fake_metric{job=\\"injected\\"} 42 #'
    client.create_producer(f"persistent://public/default/{hostile}").send(b"payload")
    text = metrics(broker)
    for line in text.splitlines():
        assert line.startswith("# ") or _SAMPLE_LINE.match(line), line
    assert "fake_metric" not in {line.split("{", 1)[0] for line in text.splitlines()}


def test_non_persistent_topics_are_in_metrics(broker, client_factory):
    client = client_factory(broker.url)
    topic = "non-persistent://public/default/telemetry"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(3):
        producer.send(b"t")
    for _ in range(3):
        consumer.receive(timeout_millis=10_000)
    text = metrics(broker)
    assert sample(text, "pulsar_in_messages_total", topic=topic) == 3
    assert sample(text, "pulsar_out_messages_total", topic=topic) == 3
    assert sample(text, "pulsar_storage_size", topic=topic) == 0
    assert sample(text, "pulsar_subscription_back_log", topic=topic, subscription="sub") == 0


def test_entry_cache_is_accounted_and_ages_out(broker_factory, client_factory):
    broker = broker_factory("managedLedgerCacheEvictionTimeThresholdMillis=500")
    producer = client_factory(broker.url).create_producer("cached", batching_enabled=False)
    for _ in range(50):
        producer.send_async(b"c" * 200, None)
    producer.flush()
    used = sample(metrics(broker), "pulsar_ml_cache_used_size")
    assert used is not None and used >= 50 * 200
    # Nothing appended since: the periodic eviction alone must release the entries.
    assert wait_for(lambda: sample(metrics(broker), "pulsar_ml_cache_used_size") == 0, timeout=10)


def test_backlog_size_and_its_quota_are_in_metrics(broker, client_factory):
    """Pulsar's pulsar_storage_backlog_size and pulsar_storage_backlog_quota_limit: what a
    dashboard compares to warn of a quota nearly reached."""
    client = client_factory(broker.url)
    topic = "persistent://public/default/quota-metrics"
    client.subscribe(topic, "slow").close()
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(10):
        producer.send(b"x" * 1000)
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/quota-metrics"
    assert http("POST", f"{url}/backlogQuota?backlogQuotaType=destination_storage",
                b'{"limitSize": 50000, "limitTime": -1, "policy": "producer_request_hold"}')[0] == 204
    text = metrics(broker)
    backlog = sample(text, "pulsar_storage_backlog_size", topic=topic)
    assert backlog == json.loads(http_get(f"{url}/stats")[2])["backlogSize"] and backlog >= 10_000
    assert sample(text, "pulsar_storage_backlog_quota_limit", topic=topic) == 50000
