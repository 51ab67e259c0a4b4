"""`magnetar.spark.compact` against real brokers: on byte-identical copies of one topic, the
Spark job (adopted by a running broker, or offline) and the broker's own compactor store
the same compacted ledger, and `is_read_compacted` readers see the same messages."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from compaction_helpers import NS, drain, stored_compacted, topic_path
from compaction_helpers import compact as broker_compact
from standalone import Standalone

from magnetar.admin_client import AdminClient
from magnetar.cli import main as cli_main
from magnetar.spark import compact
from magnetar.spark.compaction import SparkCompactionError
from magnetar.storage import ManagedLedgerFactory
from magnetar.storage.compacted_ledger import CompactedLedgerStore

TOPIC = "spark-compaction"
EARLIEST = pulsar.MessageId.earliest
#: Keep every ledger, so that a plain reader sees the whole history the expected view is
#: computed from (ledgers nothing holds are trimmed otherwise; the compacted view outlives them).
RETAIN = ["defaultRetentionTimeInMinutes=-1", "defaultRetentionSizeInMB=-1"]


def send_random(url: str, topic: str, count: int, seed: int) -> None:
    """Keyed messages (1 in 8 a delete, a few keyless) through the official client's
    batching, LZ4-compressed, so batches hold many keys, and a few unbatched ones.

    They are stored in the order they are sent, whatever the timing: two producers are
    ordered against each other only by flushing one before the other sends (a batch still
    open when the unbatched producer sends would land after it), and tests compare the
    latest value per key of two topics written alike."""
    rng = random.Random(seed)
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        batched = client.create_producer(topic, batching_enabled=True, compression_type=pulsar.CompressionType.LZ4)
        single = client.create_producer(topic, batching_enabled=False)
        previous = batched
        for i in range(count):
            producer = single if i % 50 == 0 else batched
            if producer is not previous:
                previous.flush()  # returns once what it sent is stored
                previous = producer
            if i % 97 == 0:
                producer.send_async(f"keyless-{seed}-{i}".encode(), None)
                continue
            key = f"k{rng.randrange(400)}"
            if rng.random() < 0.125:
                producer.send_async(None, None, partition_key=key)
            else:
                value = f"{key}={seed}.{i}".encode() * rng.randint(1, 3)
                producer.send_async(value, None, partition_key=key, properties={"i": str(i)})
            if i % 500 == 499:
                batched.flush()
                single.flush()
        batched.flush()
        single.flush()
    finally:
        client.close()


def compacted_view(url: str, topic: str, compacted: bool = True) -> list[tuple[tuple[int, int, int], str, bytes, dict]]:
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, EARLIEST, is_read_compacted=compacted)
        return [((m.message_id().ledger_id(), m.message_id().entry_id(), m.message_id().batch_index()),
                 m.partition_key(), m.data(), m.properties()) for m in drain(reader)]
    finally:
        client.close()


def staged_leftovers(data_dir: Path) -> list[Path]:
    return list(data_dir.glob("managed-ledgers/*/compacted/staging-*"))


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict:
    """One topic written by a broker, then copied byte for byte into three data dirs."""
    root = tmp_path_factory.mktemp("spark-compaction")
    original = Standalone(root / "a", RETAIN).start()
    try:
        send_random(original.url, TOPIC, 3000, seed=1)
        expected = expected_view(original.url, TOPIC)
    finally:
        original.stop()
    for name in ("b", "c"):
        shutil.copytree(root / "a", root / name, ignore=shutil.ignore_patterns("LOCK"))
    return {"root": root, "expected": expected}


@pytest.fixture(scope="module")
def brokers(copies) -> dict:
    started = {name: Standalone(copies["root"] / name, RETAIN).start() for name in ("a", "b")}
    yield started
    for broker in started.values():
        broker.stop()


def expected_view(url: str, topic: str) -> set[tuple[str, bytes]]:
    """Each key's latest value in a plain reader's (stored) order; an empty value deletes."""
    latest: dict[str, bytes] = {}
    for _id, key, value, _props in compacted_view(url, topic, compacted=False):
        if not key:
            continue
        if value:
            latest[key] = value
        else:
            latest.pop(key, None)
    return set(latest.items())


def test_spark_compaction_equals_the_brokers_own(spark, copies, brokers):
    a, b = brokers["a"], brokers["b"]
    offline = compact(spark, TOPIC, path=str(copies["root"] / "c"))  # no broker holds c
    adopted = compact(spark, TOPIC, service_url=a.admin_url, path=str(a.data_dir))
    broker_compact(b.admin_url, TOPIC)

    assert [r.keys for r in adopted] == [len(copies["expected"])] == [r.keys for r in offline]
    stored = stored_compacted(a.data_dir, TOPIC)
    assert stored == stored_compacted(b.data_dir, TOPIC)
    assert stored == stored_compacted(copies["root"] / "c", TOPIC)
    assert len(stored) == adopted[0].entries_written
    view = compacted_view(a.url, TOPIC)
    assert view == compacted_view(b.url, TOPIC)
    assert {(key, value) for _id, key, value, _props in view} == copies["expected"]
    assert not staged_leftovers(a.data_dir) and not staged_leftovers(copies["root"] / "c")


def test_second_run_reads_the_previous_compaction_and_the_new_tail(spark, brokers):
    """On a topic of its own, written alike to both brokers: compacted once, then given a
    tail, then compacted again, by Spark on one broker and by the broker itself on the other."""
    a, b = brokers["a"], brokers["b"]
    topic = "spark-second-run"
    for seed in (1, 2):
        send_random(a.url, topic, 1500, seed=seed)
        send_random(b.url, topic, 1500, seed=seed)
        (result,) = compact(spark, topic, service_url=a.admin_url, path=str(a.data_dir))
        broker_compact(b.admin_url, topic)
    assert result.base is not None and result.horizon > result.base
    view_a = [(key, value) for _id, key, value, _props in compacted_view(a.url, topic)]
    view_b = [(key, value) for _id, key, value, _props in compacted_view(b.url, topic)]
    # the same messages in the same order, but batched apart: the order of keys may differ
    assert len(view_a) == len(dict(view_a)) and dict(view_a) == dict(view_b)
    assert set(view_a) == expected_view(a.url, topic) == expected_view(b.url, topic)
    assert compact(spark, topic, service_url=a.admin_url, path=str(a.data_dir))[0].horizon is None  # nothing new


def send_late(url: str, topic: str) -> None:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.create_producer(topic).send(b"late", partition_key="late")
    finally:
        client.close()


def test_a_broker_holding_the_data_dir_is_not_bypassed(spark, brokers):
    a = brokers["a"]
    topic = "spark-held"
    send_late(a.url, topic)
    with pytest.raises(SparkCompactionError, match="a broker holds the data directory"):
        compact(spark, topic, path=str(a.data_dir))
    assert not staged_leftovers(a.data_dir)


def test_adoption_refuses_what_does_not_fit(spark, brokers):
    """On a topic of its own, compacted by the broker, then written to: a staged result must
    start where the last compaction ended and end within the topic."""
    a = brokers["a"]
    topic = "spark-adoption"
    send_random(a.url, topic, 200, seed=4)
    broker_compact(a.admin_url, topic)
    send_late(a.url, topic)
    url = topic_path(a.admin_url, topic) + "/compaction/adopt"
    code, _, body = http("POST", url, json.dumps({"staging": "staging-x", "horizon": [0, 0], "base": None,
                                                 "entries": 0}).encode())
    assert code == 409 and "compacted up to" in json.loads(body)["reason"]  # the base is checked first
    status = json.loads(http("GET", topic_path(a.admin_url, topic) + "/compaction")[2])
    assert status["status"] == "ERROR"
    code, _, body = http("POST", url, json.dumps({"horizon": [0, 0], "entries": 0}).encode())
    assert code == 400 and "staging" in json.loads(body)["reason"]
    with ManagedLedgerFactory(a.data_dir, read_only=True) as factory:
        store = CompactedLedgerStore(factory, f"{NS}/persistent/{topic}")
        base = list(store.current.horizon)
        store.close()
    stats = json.loads(http("GET", topic_path(a.admin_url, topic) + "/internalStats")[2])
    last = [int(part) for part in stats["lastConfirmedEntry"].split(":")]
    assert last > base  # the late message
    for staging, reason in (("../../x", "invalid staging name"), ("staging-none", "nothing staged")):
        body = json.dumps({"staging": staging, "horizon": last, "base": base, "entries": 0}).encode()
        code, _, answer = http("POST", url, body)
        assert code == 412 and reason in json.loads(answer)["reason"], answer
    code, _, answer = http("POST", url, json.dumps({"staging": "staging-x", "horizon": [last[0], last[1] + 10**6],
                                                   "base": base, "entries": 0}).encode())
    assert code == 412 and "beyond the topic's last entry" in json.loads(answer)["reason"]


def test_cli_compacts_with_spark_and_a_progress_bar(spark, brokers, capsys):
    a = brokers["a"]
    topic = "spark-cli"
    send_random(a.url, topic, 200, seed=5)
    send_late(a.url, topic)
    assert cli_main(["compact", "--spark", topic, "--data-dir", str(a.data_dir), "--admin-url", a.admin_url]) == 0
    captured = capsys.readouterr()
    assert "100.0%" in captured.err and "compacted" in captured.out
    view = {(key, value) for _id, key, value, _props in compacted_view(a.url, topic)}
    assert ("late", b"late") in view and view == expected_view(a.url, topic)


def test_partitioned_topic_is_compacted_partition_by_partition(spark, brokers):
    a = brokers["a"]
    AdminClient(a.admin_url).create_partitioned_topic("spark-parts", 2)
    send_random(a.url, "spark-parts", 600, seed=3)
    results = compact(spark, "spark-parts", service_url=a.admin_url, path=str(a.data_dir))
    assert sorted(r.topic for r in results) == [f"persistent://{NS}/spark-parts-partition-{i}" for i in range(2)]
    assert all(r.horizon is not None for r in results)
    view = {(key, value) for _id, key, value, _props in compacted_view(a.url, "spark-parts")}
    assert view == expected_view(a.url, "spark-parts")


def test_spark_compaction_leaves_out_aborted_messages_and_stops_at_an_open_transaction(spark, tmp_path):
    """PIP-31: what the broker's own compaction does (tests/broker/test_pulsar_transactions.py)."""
    import magnetar.client  # noqa: PLC0415

    broker = Standalone(tmp_path / "data", ["transactionCoordinatorEnabled=true"]).start()
    topic = f"persistent://{NS}/spark-txn"
    client = magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10)
    try:
        client.subscribe(topic, "keep").close()  # retention 0: a subscription keeps the entries
        producer = client.create_producer(topic)
        for value, commit in ((b"k1-committed", True), (b"k1-aborted", False)):
            txn = client.new_transaction(timeout=60)
            producer.send(value, partition_key="k1", txn=txn)
            txn.commit() if commit else txn.abort()
        still_open = client.new_transaction(timeout=60)
        producer.send(b"k2-open", partition_key="k2", txn=still_open)
        producer.send(b"k3-plain", partition_key="k3")
        compact(spark, topic, service_url=broker.admin_url, path=str(broker.data_dir))
        assert [value for _id, _key, value, _props in compacted_view(broker.url, topic)] == [b"k1-committed"]
        still_open.commit()
        compact(spark, topic, service_url=broker.admin_url, path=str(broker.data_dir))
        assert [value for _id, _key, value, _props in compacted_view(broker.url, topic)] == [
            b"k1-committed", b"k2-open", b"k3-plain"]
    finally:
        client.close()
        broker.stop()
