"""A full disk with the official client: sends fail, reads and acks go on, writing resumes by itself.

Two disks: a fault switch (storage.faults, no privileges needed) that makes writes fail as a
full disk does, and a real 20 MB tmpfs (skipped where mounting is not allowed).

The official client answers a PersistenceError by reconnecting and sending its pending
messages again, as it does for every send error but a checksum one; a send therefore fails
to its callback with a timeout while the disk stays full (the raw client below sees the
PersistenceError itself), and succeeds if space returns before its send timeout.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import uuid
from pathlib import Path

import pulsar
import pytest
from admin_http import get_json, http
from polling import wait_for
from rawclient import RawClient
from standalone import Standalone

from magnetar.storage.faults import ENV_VAR
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
TOPIC = "persistent://public/default/full"


class Send:
    """One send_async and the result the official client gives its callback."""

    def __init__(self, producer, data: bytes) -> None:
        self.done = threading.Event()
        self.result: pulsar.Result | None = None
        producer.send_async(data, self._callback)

    def _callback(self, result, _message_id) -> None:
        self.result = result
        self.done.set()

    def outcome(self, timeout: float = 30.0) -> pulsar.Result:
        assert self.done.wait(timeout), "the send callback never ran"
        return self.result


def send_outcome(producer, data: bytes, timeout: float = 30.0) -> pulsar.Result:
    return Send(producer, data).outcome(timeout)


def read_all(client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=5000).data())
    reader.close()
    return out


@pytest.fixture
def switch_broker(tmp_path):
    switch = tmp_path / "disk-full"
    # infinite retention: the end of the test reads back every message, acknowledged or not
    config = ["managedLedgerMaxEntriesPerLedger=4", "managedLedgerMinLedgerRolloverTimeMinutes=0",
              "defaultRetentionTimeInMinutes=-1", "defaultRetentionSizeInMB=-1"]
    broker = Standalone(tmp_path / "data", config, env={ENV_VAR: str(switch)}).start()
    yield broker, switch
    with contextlib.suppress(Exception):
        broker.stop()


def test_sends_fail_while_full_reads_and_acks_go_on_and_writing_resumes(switch_broker, client_factory):
    broker, switch = switch_broker
    client = client_factory(broker.url)
    producer = client.create_producer(TOPIC, batching_enabled=False, block_if_queue_full=True)
    receipted = [f"before-{i}".encode() for i in range(10)]
    for data in receipted:
        producer.send(data)
    consumer = client_factory(broker.url).subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))

    switch.touch()
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer(TOPIC, producer_id=7)
    raw.send(7, 0, b"raw")
    error = raw.expect(T.SEND_ERROR).send_error
    assert error.error == pb.PersistenceError and "disk is full" in error.message
    raw.close()
    # The official client answers the error by reconnecting and sending again: the
    # message stays pending (not receipted) for as long as the disk is full.
    held = Send(producer, b"while-full")
    assert not held.done.wait(2.0)
    for i in range(5, 10):  # reads and acks go on, on the consumer's own connection
        message = consumer.receive(timeout_millis=5000)
        assert message.data() == f"before-{i}".encode()
        consumer.acknowledge(message)
    impatient = client_factory(broker.url, operation_timeout_seconds=3)
    with pytest.raises(pulsar.PulsarException):  # a new subscription cannot be persisted
        impatient.subscribe(TOPIC, "new-while-full", initial_position=pulsar.InitialPosition.Earliest)

    switch.unlink()
    assert held.outcome() == pulsar.Result.Ok  # stored by the client's own retry, once
    receipted.append(b"while-full")
    after = [f"after-{i}".encode() for i in range(6)]  # crosses ledger boundaries
    for data in after:
        assert send_outcome(producer, data) == pulsar.Result.Ok
    receipted += after
    tail = [consumer.receive(timeout_millis=5000) for _ in range(7)]
    assert [message.data() for message in tail] == [b"while-full", *after]
    for message in tail:
        consumer.acknowledge(message)
    stats_url = f"{broker.admin_url}/admin/v2/persistent/public/default/full/stats"
    assert wait_for(lambda: get_json(stats_url)["subscriptions"]["sub"]["msgBacklog"] == 0, timeout=20.0)
    client.close()

    broker.stop()
    log = broker.log()
    assert "Traceback" not in log, log
    broker.restart()
    client = client_factory(broker.url)
    assert read_all(client, TOPIC) == receipted  # exactly what was receipted, nothing torn
    subscriptions = get_json(f"{broker.admin_url}/admin/v2/persistent/public/default/full/stats")["subscriptions"]
    assert list(subscriptions) == ["sub"]  # the refused one never existed
    assert subscriptions["sub"]["msgBacklog"] == 0  # acks made while full were persisted later


# --- a real small file system -------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path) -> Path:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mount_point)], check=True,
                       capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {exc}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True, timeout=10)


def fill_until_held(producer, chunk: bytes, limit: int = 400) -> tuple[int, Send]:
    """Send until a send stays unanswered: the official client holds it while the disk is full."""
    for sent in range(limit):
        send = Send(producer, chunk)
        if not send.done.wait(5.0):
            return sent, send
        assert send.result == pulsar.Result.Ok
    raise AssertionError("the disk never filled")


def test_a_real_full_disk_recovers_when_a_topic_is_deleted(small_disk, client_factory):
    # infinite retention: only deleting the other topic frees space
    broker = Standalone(small_disk / "data", ["managedLedgerMaxSizePerLedgerMbytes=1",
                                              "managedLedgerMinLedgerRolloverTimeMinutes=0",
                                              "defaultRetentionTimeInMinutes=-1",
                                              "defaultRetentionSizeInMB=-1"]).start()
    try:
        client = client_factory(broker.url)
        chunk = os.urandom(256 * 1024)
        ballast = client.create_producer("persistent://public/default/ballast", batching_enabled=False)
        for _ in range(24):  # 6 MB that deleting this topic gives back
            ballast.send(chunk)
        ballast.close()
        producer = client.create_producer(TOPIC, batching_enabled=False, block_if_queue_full=True)
        consumer = client_factory(broker.url).subscribe(TOPIC, "sub",
                                                        initial_position=pulsar.InitialPosition.Earliest)
        stored, held = fill_until_held(producer, chunk)
        assert stored > 0
        for _ in range(stored):  # reads and acks go on with the disk full
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        assert not held.done.is_set()
        status, _, body = http("DELETE", f"{broker.admin_url}/admin/v2/persistent/public/default/ballast?force=true")
        assert status == 204, body
        assert held.outcome() == pulsar.Result.Ok  # writing resumed by itself
        assert consumer.receive(timeout_millis=5000).data() == chunk
        marker = uuid.uuid4().bytes
        assert send_outcome(producer, marker) == pulsar.Result.Ok
        assert consumer.receive(timeout_millis=5000).data() == marker
        assert "Traceback" not in broker.log(), broker.log()
    finally:
        broker.stop()
