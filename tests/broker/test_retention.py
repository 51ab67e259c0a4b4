"""Retention and trimming with the official client: consumed ledgers go, retained ones stay."""

from __future__ import annotations

import json
from pathlib import Path

import pulsar
import pytest
from admin_http import get_json, http
from polling import wait_for

BASE = "/admin/v2/persistent/public/default"
NAMESPACE = "/admin/v2/namespaces/public/default"
SMALL_LEDGERS = ("managedLedgerMaxEntriesPerLedger=5", "managedLedgerMinLedgerRolloverTimeMinutes=0")


def ledger_ids(broker, topic: str) -> list[int]:
    return [ledger["ledgerId"] for ledger in get_json(f"{broker.admin_url}{BASE}/{topic}/internalStats")["ledgers"]]


def files_on_disk(data_dir: Path) -> dict[int, int]:
    """Ledger id -> data file size, for every ledger file of the data dir."""
    return {int(path.stem): path.stat().st_size for path in (data_dir / "managed-ledgers").glob("*/*.log")}


def trimmed_to(broker, topic: str, count: int) -> bool:
    """The topic lists `count` ledgers and the data dir holds exactly their files. A trim
    takes ledgers off the list first and unlinks their files afterwards (crash-safe order,
    on the broker's trimmer thread), so the list alone may run ahead of the disk."""
    listed = ledger_ids(broker, topic)
    return len(listed) == count and set(files_on_disk(broker.data_dir)) == set(listed)


def produce(client, topic: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode() * 50) for i in range(count)]
    producer.close()
    return ids


def post_json(url: str, body: object) -> tuple[int, bytes]:
    status, _, text = http("POST", url, json.dumps(body).encode())
    return status, text


def test_acked_ledgers_are_trimmed_and_stats_match_the_files(broker_factory, client_factory):
    broker = broker_factory(*SMALL_LEDGERS)
    client = client_factory(broker.url)
    consumer = client.subscribe("acked", "sub", initial_position=pulsar.InitialPosition.Earliest)
    produce(client, "acked", 23)  # ledgers of 5: four closed, the fifth being written
    assert len(ledger_ids(broker, "acked")) == 5
    for _ in range(12):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    # two ledgers consumed: trimmed in the background after the acks, no admin call
    assert wait_for(lambda: trimmed_to(broker, "acked", 3)), (ledger_ids(broker, "acked"),
                                                              files_on_disk(broker.data_dir))
    stats = get_json(f"{broker.admin_url}{BASE}/acked/stats")
    internal = get_json(f"{broker.admin_url}{BASE}/acked/internalStats")
    on_disk = files_on_disk(broker.data_dir)
    assert on_disk == {ledger["ledgerId"]: ledger["size"] for ledger in internal["ledgers"]}
    assert stats["storageSize"] == sum(on_disk.values()) == internal["totalSize"]
    assert 0 < stats["backlogSize"] <= stats["storageSize"]
    for _ in range(11):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    assert wait_for(lambda: len(ledger_ids(broker, "acked")) == 1)  # only the one being written
    assert get_json(f"{broker.admin_url}{BASE}/acked/stats")["backlogSize"] == 0


def test_without_subscriptions_the_retention_check_trims(broker_factory, client_factory):
    broker = broker_factory(*SMALL_LEDGERS, "retentionCheckIntervalInSeconds=1")
    produce(client_factory(broker.url), "nobody", 12)
    assert wait_for(lambda: trimmed_to(broker, "nobody", 1)), (ledger_ids(broker, "nobody"),
                                                               files_on_disk(broker.data_dir))


def test_namespace_and_topic_retention_keep_consumed_data(broker_factory, client_factory):
    broker = broker_factory(*SMALL_LEDGERS)
    admin = broker.admin_url
    assert post_json(f"{admin}{NAMESPACE}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})[0] == 204
    assert get_json(f"{admin}{NAMESPACE}/retention") == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    client = client_factory(broker.url)
    produce(client, "kept", 12)
    assert http("POST", f"{admin}{BASE}/kept/trim")[0] == 204
    assert len(ledger_ids(broker, "kept")) == 3  # infinite retention on the namespace

    topic_policy = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert post_json(f"{admin}{BASE}/kept/retention", topic_policy)[0] == 204
    assert get_json(f"{admin}{BASE}/kept/retention") == topic_policy
    assert http("POST", f"{admin}{BASE}/kept/trim")[0] == 204
    assert len(ledger_ids(broker, "kept")) == 1  # the topic's policy wins

    assert http("DELETE", f"{admin}{BASE}/kept/retention")[0] == 204
    assert http("DELETE", f"{admin}{NAMESPACE}/retention")[0] == 204
    assert get_json(f"{admin}{NAMESPACE}/retention") is None


def test_retention_time_keeps_recent_ledgers(broker_factory, client_factory):
    """Minutes may be fractional here: 0.05 min = 3 s."""
    broker = broker_factory(*SMALL_LEDGERS)
    admin = broker.admin_url
    assert post_json(f"{admin}{BASE}/timed/retention", {"retentionTimeInMinutes": 0.05, "retentionSizeInMB": -1})[
        0] == 204
    produce(client_factory(broker.url), "timed", 12)
    assert http("POST", f"{admin}{BASE}/timed/trim")[0] == 204
    assert len(ledger_ids(broker, "timed")) == 3
    assert wait_for(lambda: http("POST", f"{admin}{BASE}/timed/trim")[0] == 204
                    and len(ledger_ids(broker, "timed")) == 1)


@pytest.mark.parametrize(("body", "reason"), [
    ({"retentionTimeInMinutes": 0, "retentionSizeInMB": 10}, "single time or size limit to 0"),
    ({"retentionTimeInMinutes": -2, "retentionSizeInMB": -1}, "time limit must be >= -1"),
    ({"retentionTimeInMinutes": 10, "retentionSizeInMB": "big"}, "must be numbers"),
    ([1, 2], "JSON object"),
])
def test_invalid_retention_is_refused_with_412(broker, body, reason):
    for url in (f"{broker.admin_url}{NAMESPACE}/retention", f"{broker.admin_url}{BASE}/t/retention"):
        status, text = post_json(url, body)
        assert status == 412, text
        assert reason in json.loads(text)["reason"]


def test_retention_must_exceed_the_backlog_quota(broker):
    admin = broker.admin_url
    quota = {"limitSize": 20 * 1024 * 1024, "limitTime": -1, "policy": "producer_request_hold"}
    assert post_json(f"{admin}{NAMESPACE}/backlogQuota", quota)[0] == 204
    status, text = post_json(f"{admin}{NAMESPACE}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10})
    assert status == 412 and "backlog quota" in json.loads(text)["reason"]
    assert post_json(f"{admin}{NAMESPACE}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 30})[
        0] == 204


def test_an_idle_ledger_past_the_max_rollover_time_is_closed_and_trimmed(broker_factory, client_factory):
    broker = broker_factory("managedLedgerMaxLedgerRolloverTimeMinutes=0.02",
                            "managedLedgerMinLedgerRolloverTimeMinutes=0", "retentionCheckIntervalInSeconds=1")
    client = client_factory(broker.url)
    consumer = client.subscribe("idle", "sub")
    produce(client, "idle", 3)
    for _ in range(3):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    assert wait_for(lambda: ledger_ids(broker, "idle") == [])
    assert files_on_disk(broker.data_dir) == {}
    produce(client, "idle", 1)  # writing resumes in a new ledger
    assert consumer.receive(timeout_millis=5000).data() == b"m0" * 50
