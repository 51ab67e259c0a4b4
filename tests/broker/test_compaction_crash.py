"""Compaction across restarts: the result survives one, a SIGKILL during phase two leaves
the previous compaction in force and its half-written ledger is removed."""

from __future__ import annotations

import time

import pytest
from admin_http import http
from compaction_helpers import NS, compact, drain, kv, status, topic_path
from test_compaction import compacted_reader

from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb


def test_compaction_survives_restart(broker, client_factory):
    client = client_factory(broker.url)
    producer = client.create_producer("durable")
    for i in range(30):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 3}")
    compact(broker.admin_url, "durable")
    client.close()
    broker.restart()
    client = client_factory(broker.url)
    assert kv(drain(compacted_reader(client, "durable"))) == [("k0", b"v27"), ("k1", b"v28"), ("k2", b"v29")]


def _write_directly(data_dir, count: int, first_seq: int) -> None:
    """Entries appended through storage while no broker runs (fast, and many)."""
    with ManagedLedgerFactory(data_dir) as factory:
        ledger = factory.open(f"{NS}/persistent/big")
        now = int(time.time() * 1000)
        for i in range(first_seq, first_seq + count):
            md = pb.MessageMetadata(producer_name="direct", sequence_id=i, publish_time=now, partition_key=f"k{i}")
            ledger.append(build_entry(md, b"x" * 20))
        ledger.close()


@pytest.mark.slow
def test_sigkill_during_phase_two_keeps_the_previous_compaction(broker_factory, tmp_path, client_factory):
    data_dir = tmp_path / "data"
    _write_directly(data_dir, 100, 0)
    broker = broker_factory(data_dir=data_dir)
    compact(broker.admin_url, "big")
    compacted_dir = next((data_dir / "managed-ledgers").iterdir()) / "compacted"
    before = sorted(p.name for p in compacted_dir.iterdir())
    broker.stop()
    _write_directly(data_dir, 300_000, 100)
    broker.start()
    assert http("PUT", topic_path(broker.admin_url, "big") + "/compaction", b"")[0] == 204
    deadline = time.monotonic() + 120
    while "compaction phase two" not in broker.log() and time.monotonic() < deadline:
        assert status(broker.admin_url, "big")["status"] == "RUNNING"
        time.sleep(0.01)
    broker.kill()
    assert "compacted up to" not in broker.log().split("compaction phase two", 1)[1], "phase two ended before the kill"
    assert len(list(compacted_dir.iterdir())) > len(before)  # the half-written ledger is there

    broker.start()
    assert sorted(p.name for p in compacted_dir.iterdir()) == before  # orphan removed, previous kept
    client = client_factory(broker.url)
    reader = compacted_reader(client, "big")
    first = [reader.read_next(10000).partition_key() for _ in range(3)]
    assert first == ["k0", "k1", "k2"]
    assert status(broker.admin_url, "big")["status"] == "NOT_RUN"
    compact(broker.admin_url, "big", timeout=300)
    assert len(list(compacted_dir.iterdir())) == 3
