"""A full disk: producers are held, not failed; reads and acks go on; writing resumes by itself.

Two disks: the fault switch (storage.faults, no privileges needed), which makes writes fail
as a full disk does, and a real small file system (tests/small_disk.py: a loop-mounted ext4
image, or a tmpfs; skipped only where neither can be mounted).

What clients see (broker.topics.full_disk): a write that finds no room closes the topic's
producers, and they are refused on their return (ProducerBlockedQuotaExceededError) until a
write fits again, with no new connection. Their sends stay pending in the client and fail
with Timeout at the producer's send timeout, so a Timeout means "not stored"; a producer
or subscription new to the broker is refused at once with a code the client does not
retry. Once there is room the held producers are recalled, and what they still hold is
stored. Both clients run with their default options, but for the send timeout of the
producer whose Timeout a test waits for (the default 30 s is measured in
benchmarks/full_disk_bench.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from pathlib import Path

import pulsar
import pytest
from admin_http import get_json, http
from compaction_helpers import drain
from polling import wait_for
from rawclient import RawClient
from small_disk import MountUnavailable, fill, mount_small_disk
from standalone import Standalone

import magnetar.client
from magnetar.client.aio import handler as handler_module
from magnetar.client.backoff import Backoff
from magnetar.storage.faults import ENV_VAR
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
TOPIC = "persistent://public/default/full"
OTHER = "persistent://public/default/other"
BIG = os.urandom(64 * 1024)
"""Bigger than what is left in a ledger file's last block: it needs fresh room."""
IMPATIENT_MS = 2000
DISK_FULL_LINE = "disk full ("
ROOM_AGAIN_LINE = "disk has room again"
QUIET_WHILE_FULL = re.compile(
    r" (magnetar\.broker\.topics\.full_disk|magnetar\.admin|magnetar\.storage\.space_reserve): ")
"""The only loggers allowed a line while the disk is full: its one line, the admin requests
the test makes, and the reserve given back for a trim."""


class Send:
    """One send_async and the result its callback gets."""

    def __init__(self, producer, data: bytes) -> None:
        self.done = threading.Event()
        self.result = None
        producer.send_async(data, self._callback)

    def _callback(self, result, _message_id) -> None:
        self.result = result
        self.done.set()

    def outcome(self, timeout: float = 30.0):
        assert self.done.wait(timeout), "the send callback never ran"
        return self.result


def read_all(client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    with contextlib.closing(reader):
        return [message.data() for message in drain(reader)]


def health(broker: Standalone) -> tuple[int, bytes]:
    status, _, body = http("GET", f"{broker.admin_url}/admin/v2/brokers/health")
    return status, body


def writable_gauge(broker: Standalone) -> str:
    _, _, body = http("GET", f"{broker.admin_url}/metrics")
    return re.search(rb"^pulsar_broker_storage_writable\{[^}]*\} (\S+)$", body, re.M).group(1).decode()


def assert_quiet(log_while_full: str) -> None:
    """No new connection and no line per refusal while the disk is full: one line said it."""
    lines = log_while_full.splitlines()
    assert [line for line in lines if not QUIET_WHILE_FULL.search(line)] == [], log_while_full
    assert sum(DISK_FULL_LINE in line for line in lines) == 1, log_while_full


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


def test_producers_are_held_without_new_connections_and_come_back_when_there_is_room(switch_broker, api):
    broker, switch = switch_broker
    module, make = api
    client = make(broker.url)  # its producers and its consumer share one connection
    producer = client.create_producer(TOPIC)
    impatient = client.create_producer(TOPIC, send_timeout_millis=IMPATIENT_MS)
    receipted = [f"before-{i}".encode() for i in range(10)]
    for data in receipted:
        producer.send(data)
    consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    assert (health(broker)[0], writable_gauge(broker)) == (200, "1")

    mark = len(broker.log())
    switch.touch()
    held = Send(producer, b"held")
    with pytest.raises(module.Timeout):  # at its send timeout: never stored, so safe to send again
        impatient.send(b"timed out")
    assert not held.done.is_set()  # held in the client, with the default 30 s to wait
    for i in range(5, 10):  # reads and acks go on, on the same connection
        message = consumer.receive(timeout_millis=5000)
        assert message.data() == f"before-{i}".encode()
        consumer.acknowledge(message)
    with pytest.raises(module.NotAllowedError):  # at once, not after the operation timeout
        client.subscribe(TOPIC, "new-while-full")
    with pytest.raises(module.ProducerBlockedQuotaExceededError):
        client.create_producer(OTHER)
    status, body = health(broker)
    assert status == 500 and b"disk is full" in body
    assert writable_gauge(broker) == "0"
    assert_quiet(broker.log()[mark:])

    switch.unlink()
    assert held.outcome() == pulsar.Result.Ok  # recalled and stored, once
    receipted.append(b"held")
    after = [f"after-{i}".encode() for i in range(6)]  # crosses ledger boundaries
    for data in after:
        producer.send(data)
    receipted += after
    assert [consumer.receive(timeout_millis=5000).data() for _ in range(7)] == [b"held", *after]
    assert (health(broker)[0], writable_gauge(broker)) == (200, "1")
    assert sum(ROOM_AGAIN_LINE in line for line in broker.log().splitlines()) == 1
    client.close()

    broker.stop()
    assert "Traceback" not in broker.log(), broker.log()
    broker.restart()
    assert read_all(make(broker.url), TOPIC) == receipted  # exactly what was receipted, nothing torn
    subscriptions = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/full/stats")[2]
    assert b"new-while-full" not in subscriptions  # the refused one never existed


def test_a_new_subscription_or_topic_without_room_leaves_nothing_behind_and_is_made_later(switch_broker, api):
    """Their records are written off the event loop (issue 45): the refusal comes when that
    write fails, and what was half made in memory goes with it."""
    module, make = api
    broker, switch = switch_broker
    namespace = f"{broker.admin_url}/admin/v2/persistent/public/default"
    subscriptions = f"{namespace}/full/subscriptions"
    client = make(broker.url)
    producer = client.create_producer(TOPIC)  # the topic is there before the disk fills
    client.subscribe(TOPIC, "before").close()  # and the broker's once-only records
    switch.touch()
    for _ in range(2):  # asked again while still full: refused again, not stuck
        with pytest.raises(module.NotAllowedError):
            client.subscribe(TOPIC, "while-full")
        with pytest.raises(module.ProducerBlockedQuotaExceededError):
            client.create_producer(OTHER)
    assert get_json(subscriptions) == ["before"]  # no half-made subscription in memory
    assert OTHER not in get_json(namespace)
    switch.unlink()
    assert wait_for(lambda: health(broker)[0] == 200)
    consumer = client.subscribe(TOPIC, "while-full")
    late = client.create_producer(OTHER)
    producer.send(b"after")
    late.send(b"late")
    assert consumer.receive(timeout_millis=10_000).data() == b"after"
    assert sorted(get_json(subscriptions)) == ["before", "while-full"]
    client.close()
    broker.stop()
    broker.restart()  # on new ports
    namespace = f"{broker.admin_url}/admin/v2/persistent/public/default"
    assert sorted(get_json(f"{namespace}/full/subscriptions")) == ["before", "while-full"]
    assert OTHER in get_json(namespace)
    assert "Traceback" not in broker.log()


def test_on_the_wire_a_full_disk_closes_producers_refuses_them_and_recalls_them(switch_broker):
    """What the clients above rely on, frame by frame."""
    broker, switch = switch_broker
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer(TOPIC, producer_id=7)
    switch.touch()
    raw.send(7, 0, b"no room")
    raw.send(7, 1, b"sent before the client learnt it was closed")  # dropped, not taken for a broken client
    assert raw.expect(T.CLOSE_PRODUCER).close_producer.producer_id == 7  # not a SEND_ERROR
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=TOPIC, producer_id=7, request_id=1, epoch=1)))
    refused = raw.expect(T.ERROR).error
    assert refused.error == pb.ProducerBlockedQuotaExceededError and "disk is full" in refused.message
    # a new producer (epoch 0) is refused too; its client gives up, so it is not recalled
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=TOPIC, producer_id=8, request_id=2)))
    assert raw.expect(T.ERROR).error.error == pb.ProducerBlockedQuotaExceededError
    switch.unlink()
    recall = raw.expect(T.CLOSE_PRODUCER).close_producer
    assert (recall.producer_id, recall.assignedBrokerServiceUrl) == (7, broker.url)
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=TOPIC, producer_id=7, request_id=3, epoch=2)))
    raw.expect(T.PRODUCER_SUCCESS)  # not a recall of producer 8 first
    raw.send(7, 0, b"stored")
    assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 0
    raw.close()


def test_health_fails_while_no_write_fits_even_with_nothing_writing(switch_broker):
    broker, switch = switch_broker
    assert health(broker)[0] == 200
    switch.touch()
    status, body = health(broker)  # the check asks the disk: nothing else wrote meanwhile
    assert status == 500 and b"the broker cannot store messages" in body
    assert writable_gauge(broker) == "0"
    switch.unlink()
    assert health(broker) == (200, b"ok")
    assert writable_gauge(broker) == "1"
    assert "Traceback" not in broker.log()


def test_a_broker_stopped_while_the_disk_is_full_stops_cleanly_and_keeps_what_it_stored(switch_broker,
                                                                                        client_factory):
    broker, switch = switch_broker
    producer = client_factory(broker.url).create_producer(TOPIC)
    receipted = [f"m{i}".encode() for i in range(3)]
    for data in receipted:
        producer.send(data)
    switch.touch()
    held = Send(producer, b"held")
    assert wait_for(lambda: DISK_FULL_LINE in broker.log())
    assert broker.stop() == 0 and "stopped cleanly" in broker.log()  # the state it could not save is rebuilt
    switch.unlink()
    broker.restart()
    assert held.outcome() == pulsar.Result.Ok  # the client still held it, and sent it to the restarted broker
    assert read_all(client_factory(broker.url), TOPIC) == [*receipted, b"held"]


# --- a real small file system -------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path) -> Path:
    try:
        with mount_small_disk(tmp_path) as disk:
            yield disk
    except MountUnavailable as exc:
        pytest.skip(f"no small file system can be mounted here (needs root or CAP_SYS_ADMIN): {exc}")


def test_a_real_full_disk_holds_producers_and_loses_nothing_receipted(small_disk, tmp_path, api):
    module, make = api
    broker = Standalone(small_disk / "data", ["defaultRetentionTimeInMinutes=-1", "defaultRetentionSizeInMB=-1"],
                        log_dir=tmp_path).start()  # the log off the disk that fills
    try:
        client = make(broker.url)
        producer = client.create_producer(TOPIC)
        impatient = client.create_producer(TOPIC, send_timeout_millis=IMPATIENT_MS)
        receipted = [f"before-{i}".encode() for i in range(10)]
        for data in receipted:
            producer.send(data)
        filler = fill(small_disk)
        mark = len(broker.log())
        held = [Send(producer, BIG)]
        with pytest.raises(module.Timeout):
            impatient.send(BIG)
        held += [Send(producer, f"while-full-{i}".encode()) for i in range(20)]  # an application going on
        assert health(broker)[0] == 500
        assert not any(send.done.is_set() for send in held)
        assert_quiet(broker.log()[mark:])

        filler.unlink()
        assert [send.outcome() for send in held] == [pulsar.Result.Ok] * len(held)
        receipted += [BIG, *(f"while-full-{i}".encode() for i in range(20))]
        assert read_all(client, TOPIC) == receipted
        assert wait_for(lambda: health(broker)[0] == 200)
        assert "Traceback" not in broker.log()
    finally:
        broker.stop()


def test_kafka_producers_get_the_storage_error_and_the_broker_logs_it_once(small_disk, tmp_path):
    """acks=all: each produce is answered KAFKA_STORAGE_ERROR, which librdkafka retries (what
    a Kafka broker answers for a log it cannot write) until message.timeout.ms (300 s by
    default, 3 s here), then reports the message timed out; nothing of it is stored."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    broker = Standalone(small_disk / "data", [], args=["--kafka", "0"], log_dir=tmp_path).start()
    try:
        bootstrap = re.search(r"Kafka listener on (127\.0\.0\.1:\d+)", broker.log()).group(1)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 3000})
        reports = []
        producer.produce("full", b"before", on_delivery=lambda err, _msg: reports.append(err))
        assert producer.flush(30) == 0 and reports == [None]
        filler = fill(small_disk)
        mark = len(broker.log())
        producer.produce("full", BIG, on_delivery=lambda err, _msg: reports.append(err))
        assert producer.flush(30) == 0
        assert reports[1].code() == confluent_kafka.KafkaError._MSG_TIMED_OUT
        assert_quiet(broker.log()[mark:])
        filler.unlink()
        producer.produce("full", b"after", on_delivery=lambda err, _msg: reports.append(err))
        assert producer.flush(30) == 0 and reports[2] is None
        assert "Traceback" not in broker.log()
    finally:
        broker.stop()


def test_magnetar_client_comes_back_when_recalled_not_when_its_backoff_ends(switch_broker, monkeypatch, caplog):
    """As the official client does on a CLOSE_PRODUCER naming a broker (PIP-307): here its
    backoff would wait a minute after the first refusal, yet the held send is stored as soon
    as there is room."""

    class PatientBackoff(Backoff):
        def next(self) -> float:
            delay = super().next()
            return delay if delay <= self.initial else 60.0

    monkeypatch.setattr(handler_module, "Backoff", PatientBackoff)
    caplog.set_level(logging.INFO, logger="magnetar.client")
    broker, switch = switch_broker
    client = magnetar.client.Client(broker.url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(TOPIC)
        producer.send(b"before")
        switch.touch()
        held = Send(producer, b"held")
        assert wait_for(lambda: "ProducerBlockedQuotaExceededError" in caplog.text)  # refused once: now a minute
        switch.unlink()
        assert held.outcome(timeout=15) == pulsar.Result.Ok
    finally:
        client.close()
