"""Transactions seen from outside (PIP-31): /admin/v3/transactions as pulsar-admin reads it,
`magnetar admin transactions`, and Pulsar's transaction metrics in /metrics, followed
through a transaction that commits, one that aborts and one that times out."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from admin_http import http
from polling import wait_for
from standalone import Standalone

import magnetar.client
from magnetar.broker.config import ServiceConfiguration

TXNS = "/admin/v3/transactions"


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("txn-admin") / "data", ["transactionCoordinatorEnabled=true"]).start()
    yield broker
    broker.stop()


def _get(broker: Standalone, path: str) -> tuple[int, object]:
    status, _, body = http("GET", broker.admin_url + path)
    return status, json.loads(body) if body else None


def _ok(broker: Standalone, path: str) -> object:
    status, body = _get(broker, path)
    assert status == 200, (path, status, body)
    return body


def _metrics(broker: Standalone) -> dict[str, float]:
    """Every transaction sample, by its name and labels as written."""
    _, _, body = http("GET", broker.admin_url + "/metrics")
    return {name: float(value) for name, value in re.findall(r"^(pulsar_txn_\S+) (\S+)$", body.decode(), re.M)}


def _metric(samples: dict[str, float], name: str, **labels: str) -> float:
    found = [value for key, value in samples.items() if key.startswith(name + "{")
             and all(f'{label}="{value}"' in key for label, value in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def _cli(broker: Standalone, *args: str) -> object:
    done = subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url, "--json",
                           "transactions", *args], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_admin_cli_and_metrics_follow_transactions(txn_broker: Standalone) -> None:
    topic = f"persistent://public/default/txn-admin-{uuid.uuid4().hex[:8]}"
    short = topic.removeprefix("persistent://")
    with magnetar.client.Client(txn_broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
        client.create_producer(topic).send(b"plain")
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producing = client.new_transaction(timeout=60)
        client.create_producer(topic).send(b"in a transaction", txn=producing)
        acking = client.new_transaction(timeout=60)
        consumer.acknowledge(consumer.receive(10_000), txn=acking)
        most, least = producing.txn_id

        assert _ok(txn_broker, f"{TXNS}/coordinatorStats")["0"]["ongoingTxnSize"] == 2
        stats = _ok(txn_broker, f"{TXNS}/coordinatorStats?coordinatorId=0")
        assert stats["state"] == "Ready" and stats["leastSigBits"] >= acking.txn_id[1]
        assert stats["lowWaterMark"] == least - 1
        assert _get(txn_broker, f"{TXNS}/coordinatorStats?coordinatorId=3")[0] == 404

        metadata = _ok(txn_broker, f"{TXNS}/transactionMetadata/{most}/{least}")
        assert metadata["status"] == "OPEN" and metadata["txnId"] == f"({most},{least})"
        start = metadata["producedPartitions"][topic]["startPosition"]
        assert start is not None and metadata["producedPartitions"][topic]["aborted"] is False
        assert metadata["timeoutAt"] - metadata["openTimestamp"] == 60_000
        acked = _ok(txn_broker, f"{TXNS}/transactionMetadata/{acking.txn_id[0]}/{acking.txn_id[1]}")
        assert list(acked["ackedPartitions"][topic]) == ["sub"]
        assert _cli(txn_broker, "transaction-metadata", "-m", str(most), "-l", str(least)) == metadata

        assert set(_ok(txn_broker, f"{TXNS}/slowTransactions/0")) == {str(producing.txn_id).replace(" ", ""),
                                                                      str(acking.txn_id).replace(" ", "")}
        assert _ok(txn_broker, f"{TXNS}/slowTransactions/3600000") == {}
        assert _cli(txn_broker, "slow-transactions", "-t", "1h") == {}

        buffer = _ok(txn_broker, f"{TXNS}/transactionBufferStats/{short}")
        assert buffer["ongoingTxnSize"] == 1 and buffer["maxReadPosition"] == start
        assert _cli(txn_broker, "transaction-buffer-stats", "-t", topic)["maxReadPosition"] == start
        assert _ok(txn_broker, f"{TXNS}/transactionInBufferStats/{short}/{most}/{least}") == \
            {"startPosition": start, "aborted": False}
        assert _ok(txn_broker, f"{TXNS}/pendingAckStats/{short}/sub")["ongoingTxnSize"] == 1
        held = _ok(txn_broker, f"{TXNS}/transactionInPendingAckStats/{short}/sub/{acking.txn_id[0]}/{acking.txn_id[1]}")
        assert len(held["ackedPositions"]) == 1
        assert _cli(txn_broker, "pending-ack-stats", "-t", topic, "-s", "sub")["ongoingTxnSize"] == 1

        before = _metrics(txn_broker)
        assert _metric(before, "pulsar_txn_active_count", coordinator_id="0") == 2
        assert _metric(before, "pulsar_txn_tb_active_total", topic=topic) == 1
        producing.commit()
        acking.abort()
        timing_out = client.new_transaction(timeout=1)
        assert wait_for(lambda: _get(txn_broker, f"{TXNS}/transactionMetadata/0/{timing_out.txn_id[1]}")[0] == 404)

        after = _metrics(txn_broker)
        assert _metric(after, "pulsar_txn_active_count") == 0
        for name, grew_by in (("pulsar_txn_created_total", 1), ("pulsar_txn_committed_total", 1),
                              ("pulsar_txn_aborted_total", 2), ("pulsar_txn_timeout_total", 1)):
            assert _metric(after, name) - _metric(before, name) == grew_by, name
        assert _metric(after, "pulsar_txn_append_log_total") > _metric(before, "pulsar_txn_append_log_total")
        latency = sum(value for key, value in after.items() if key.startswith("pulsar_txn_execution_latency_le_"))
        assert latency == _metric(after, "pulsar_txn_committed_total") + _metric(after, "pulsar_txn_aborted_total")
        assert _metric(after, "pulsar_txn_tb_committed_total", topic=topic) == 1
        assert _metric(after, "pulsar_txn_tb_active_total", topic=topic) == 0
        assert _metric(after, "pulsar_txn_tp_aborted_count_total", topic=topic, subscription="sub") == 1
        status, body = _get(txn_broker, f"{TXNS}/transactionMetadata/{most}/{least}")
        assert status == 404 and "not found" in body["reason"]


@pytest.mark.parametrize("path, status", [
    ("/transactionMetadata/0/x", 400), ("/transactionMetadata/-1/5", 400), ("/transactionMetadata/0/99999999", 404),
    ("/slowTransactions/soon", 400), ("/coordinatorStats?coordinatorId=%00", 400),
    ("/transactionBufferStats/public/default/no-such-topic", 404),
    ("/pendingAckStats/public/default/no-such-topic/sub", 404),
    ("/transactionInBufferStats/public/default/t/0/" + "9" * 400, 400),
])
def test_bad_requests_get_reasons(txn_broker: Standalone, path: str, status: int) -> None:
    got, body = _get(txn_broker, TXNS + path)
    assert got == status and body["reason"], (path, got, body)


def test_off_503_and_no_metrics(broker_factory) -> None:
    broker = broker_factory("transactionCoordinatorEnabled=false")
    status, body = _get(broker, f"{TXNS}/coordinatorStats")
    assert status == 503 and "transactionCoordinatorEnabled" in body["reason"]
    assert not _metrics(broker)


def test_open_transactions_are_capped_by_default_and_the_cap_is_told(broker_factory) -> None:
    broker = broker_factory("transactionCoordinatorEnabled=true", "maxActiveTransactionsPerCoordinator=2")
    with magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
        first, _second = client.new_transaction(timeout=30), client.new_transaction(timeout=30)
        with pytest.raises(magnetar.client.errors.PulsarException, match="maxActiveTransactionsPerCoordinator"):
            client.new_transaction(timeout=30)
        first.abort()
        client.new_transaction(timeout=30).abort()  # room again once one ended
    assert ServiceConfiguration().maxActiveTransactionsPerCoordinator == 50_000
