"""Restarts and crashes: nothing receipted is lost, nothing acknowledged comes back."""

from __future__ import annotations

import threading
import time

import pulsar
import pytest
from admin_http import get_json
from polling import wait_for
from standalone import Standalone, run_standalone

EARLIEST = pulsar.InitialPosition.Earliest


def test_restart_between_produce_and_consume(broker, client_factory):
    client = client_factory(broker.url)
    producer = client.create_producer("restart")
    consumer = client.subscribe("restart", "sub")
    for i in range(50):
        producer.send(f"{i}".encode())
    for _ in range(20):
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
    consumer.close()
    client.close()
    broker.restart()
    client = client_factory(broker.url)
    consumer = client.subscribe("restart", "sub")
    got = [consumer.receive(timeout_millis=10000).data() for _ in range(30)]
    assert got == [f"{i}".encode() for i in range(20, 50)]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=500)


def test_stopping_answers_the_sends_being_stored(broker_factory, client_factory):
    """A graceful stop while messages are being stored (a 1 s group commit keeps them there)
    sends their receipts before closing: otherwise the client sends them again after the
    restart and, without deduplication, they are stored twice."""
    broker = broker_factory("journalMaxGroupWaitMSec=1000")
    client = client_factory(broker.url, operation_timeout_seconds=30)
    producer = client.create_producer("in-flight", batching_enabled=False, send_timeout_millis=60_000)
    results: list[pulsar.Result] = []
    for i in range(20):
        producer.send_async(f"{i}".encode(), lambda result, _id: results.append(result))
    stats_url = f"{broker.admin_url}/admin/v2/persistent/public/default/in-flight/stats"
    assert wait_for(lambda: get_json(stats_url)["msgInCounter"] == 20)  # read by the broker, not yet stored
    broker.restart()
    producer.flush()
    assert results == [pulsar.Result.Ok] * 20
    reader = client.create_reader("in-flight", pulsar.MessageId.earliest)
    stored = []
    while reader.has_message_available():
        stored.append(int(reader.read_next(10_000).data()))
    assert stored == list(range(20))


def test_second_broker_on_same_data_dir_is_refused(broker):
    result = run_standalone("--data-dir", str(broker.data_dir))
    assert result.returncode != 0
    assert "in use" in result.stderr or "locked" in result.stderr.lower()


def test_sigterm_stops_cleanly(broker):
    assert broker.stop() == 0
    assert "stopped cleanly" in broker.log()


def test_unknown_config_key_is_refused(tmp_path):
    result = run_standalone("--data-dir", str(tmp_path), "-c", "noSuchKey=1")
    assert result.returncode == 2
    assert "noSuchKey" in result.stderr


def test_bad_config_value_is_refused(tmp_path):
    result = run_standalone("--data-dir", str(tmp_path), "-c", "maxMessageSize=big")
    assert result.returncode == 2
    assert "maxMessageSize" in result.stderr


def test_sigkill_during_produce_loses_no_receipted_message(tmp_path, client_factory):
    broker = Standalone(tmp_path / "data").start()
    client = client_factory(broker.url, operation_timeout_seconds=3)
    producer = client.create_producer("crash", send_timeout_millis=3000, batching_enabled=False)
    receipted: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            payload = f"msg-{i}".encode()
            try:
                producer.send(payload)
            except pulsar.PulsarException:
                return
            receipted.append(payload)
            i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    deadline = time.monotonic() + 20
    while len(receipted) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    broker.kill()
    stop.set()
    thread.join(timeout=30)
    assert len(receipted) >= 300
    client.close()

    broker.start()
    reader_client = client_factory(broker.url)
    reader = reader_client.create_reader("crash", pulsar.MessageId.earliest)
    stored = []
    while reader.has_message_available():
        stored.append(reader.read_next(timeout_millis=10000).data())
    broker.stop()
    missing = set(receipted) - set(stored)
    assert not missing, f"{len(missing)} receipted messages lost"
    assert stored[: len(receipted)] == receipted
