"""Bad bytes and faults cost the sender its own connection and nothing else.

Abuse comes from raw sockets speaking frames built with magnetar.wire; the
bystanders are an official-client producer and consumer on the same topic,
which must keep going with nothing lost while the abuse happens.
"""

from __future__ import annotations

import json
import struct
import threading
import time

import crc32c
import pulsar
import pytest
from admin_http import http_get
from rawclient import RawClient, send_frame

from magnetar.wire.entry import build_entry
from magnetar.wire.frames import encode_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
EARLIEST = pulsar.InitialPosition.Earliest
TOPIC = "persistent://public/default/bystander"


class Traffic:
    """An official producer and consumer moving messages in two threads."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=10000)
        self.consumer = client.subscribe(topic, "bystander", initial_position=EARLIEST)
        self.sent: list[bytes] = []
        self.received: list[bytes] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._produced = threading.Event()  # set once the producer thread appends no more
        self._threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]
        for thread in self._threads:
            thread.start()

    def _produce(self) -> None:
        try:
            i = 0
            while not self._stop.is_set():
                payload = f"bystander-{i}".encode()
                try:
                    self.producer.send(payload)
                except Exception as exc:  # any failure is a finding
                    self.errors.append(exc)
                    return
                self.sent.append(payload)
                i += 1
        finally:
            self._produced.set()

    def _consume(self) -> None:
        # Waiting for `_stop` alone raced a send in flight: its payload joined `sent`
        # after the consumer had already counted up to the old length and left.
        while not (self._produced.is_set() and len(self.received) >= len(self.sent)):
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            except Exception as exc:
                self.errors.append(exc)
                return
            self.received.append(msg.data())
            self.consumer.acknowledge(msg)

    def wait_progress(self, at_least: int = 20, timeout: float = 15.0) -> None:
        """Both directions move `at_least` more messages before the deadline."""
        sent0, received0 = len(self.sent), len(self.received)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert not self.errors, self.errors
            if len(self.sent) >= sent0 + at_least and len(self.received) >= received0 + at_least:
                return
            time.sleep(0.01)
        raise AssertionError(f"traffic stalled: sent {sent0}->{len(self.sent)}, "
                             f"received {received0}->{len(self.received)}")

    def stop(self) -> None:
        self._stop.set()
        self._threads[0].join(15)
        self._threads[1].join(30)
        assert not any(t.is_alive() for t in self._threads), "traffic threads did not finish"
        assert not self.errors, self.errors


def _announce(size: int) -> bytes:
    return struct.pack(">I", size)


def _connect_frame() -> bytes:
    return encode_command(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="raw", protocol_version=20)))


def _abuse_garbage(url: str) -> RawClient:
    raw = RawClient(url)
    raw.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    return raw


def _abuse_random_garbage(url: str) -> RawClient:
    raw = RawClient(url)
    raw.write(_connect_frame())
    raw.expect(T.CONNECTED)
    body = bytes(range(256)) * 4  # read as a command size, 0x00010203 overruns the frame
    raw.write(_announce(len(body)) + body)
    return raw


def _abuse_frame_over_limit(url: str) -> RawClient:
    raw = RawClient(url)
    raw.connect()
    raw.write(_announce(6 * 1024 * 1024) + _announce(8) + b"\x00" * 4096)  # never sends the rest
    return raw


def _abuse_garbage_command(url: str) -> RawClient:
    raw = RawClient(url)
    raw.connect()
    body = b"\xff" * 12
    raw.write(_announce(len(body) + 4) + _announce(len(body)) + body)
    return raw


def _abuse_command_size_past_frame(url: str) -> RawClient:
    raw = RawClient(url)
    raw.connect()
    raw.write(_announce(8) + _announce(100) + b"\x08\x12\x92\x01")
    return raw


def _abuse_garbage_in_connect_write(url: str) -> RawClient:
    raw = RawClient(url)
    raw.write(_connect_frame() + struct.pack(">II", 9, 5) + b"\xff" * 5)  # one write
    return raw


def _abuse_before_connect(url: str) -> RawClient:
    raw = RawClient(url)
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=TOPIC, producer_id=0, request_id=0)))
    return raw


ABUSES = {
    "http-request": _abuse_garbage,
    "garbage-after-connect": _abuse_random_garbage,
    "6MiB-frame": _abuse_frame_over_limit,
    "garbage-basecommand": _abuse_garbage_command,
    "command-size-past-frame": _abuse_command_size_past_frame,
    "producer-before-connect": _abuse_before_connect,
    "garbage-in-the-connect-write": _abuse_garbage_in_connect_write,
}


def test_abuse_costs_only_the_abuser(broker, client_factory):
    client = client_factory(broker.url)
    traffic = Traffic(client, TOPIC)
    try:
        traffic.wait_progress()
        for name, abuse in ABUSES.items():
            raw = abuse(broker.url)
            try:
                assert raw.closed_by_peer(10), f"{name}: broker kept the connection open"
            finally:
                raw.close()
            traffic.wait_progress()
        # Disconnects mid-frame: a producer on the same topic that dies halfway
        # through a SEND, and a fresh connection that dies inside its CONNECT.
        raw = RawClient(broker.url)
        raw.connect()
        raw.create_producer(TOPIC, producer_id=3)
        frame = send_frame(3, 0, b"never stored" * 100)
        raw.write(frame[: len(frame) // 2])
        raw.close()
        raw = RawClient(broker.url)
        raw.write(_connect_frame()[:7])
        raw.close()
        traffic.wait_progress()
    finally:
        traffic.stop()
    assert traffic.received == traffic.sent
    assert len(traffic.sent) >= 20 * (len(ABUSES) + 2)
    # Stored data is intact: a reader from the start gets exactly what was sent.
    reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
    stored = [reader.read_next(10000).data() for _ in range(len(traffic.sent))]
    assert stored == traffic.sent
    assert not reader.has_message_available()
    assert "Traceback" not in broker.log()


def test_bad_checksum_gets_send_error_and_connection_stays(broker, client_factory):
    raw = RawClient(broker.url)
    raw.connect()
    name = raw.create_producer("checksum")
    raw.send(0, 0, b"first good", producer_name=name)
    receipt = raw.expect(T.SEND_RECEIPT).send_receipt
    assert receipt.sequence_id == 0
    raw.send(0, 1, b"corrupted", producer_name=name, corrupt=True)
    error = raw.expect(T.SEND_ERROR).send_error
    assert (error.sequence_id, error.error) == (1, pb.ChecksumError)
    raw.send(0, 2, b"second good", producer_name=name)
    receipt2 = raw.expect(T.SEND_RECEIPT).send_receipt
    assert receipt2.sequence_id == 2
    assert receipt2.message_id.entryId == receipt.message_id.entryId + 1
    raw.close()
    reader = client_factory(broker.url).create_reader("checksum", pulsar.MessageId.earliest)
    assert [reader.read_next(10000).data() for _ in range(2)] == [b"first good", b"second good"]
    assert not reader.has_message_available()


MAX_MESSAGE_SIZE = 10_000  # frame limit = 10_000 + 10 KiB padding = 20_240


@pytest.mark.parametrize(
    ("size", "outcome"),
    [
        (9_000, "receipt"),  # under maxMessageSize
        (12_000, "receipt"),  # over it by less than the chunking slack (half the padding)
        (16_000, "send-error"),  # over the slack, but the frame is within the limit
        (30_000, "closed"),  # the frame itself is over maxMessageSize + padding
    ],
)
def test_message_over_max_message_size(broker_factory, client_factory, size, outcome):
    broker = broker_factory(f"maxMessageSize={MAX_MESSAGE_SIZE}")
    raw = RawClient(broker.url)
    assert raw.connect().max_message_size == MAX_MESSAGE_SIZE
    name = raw.create_producer("big")
    raw.send(0, 0, b"x" * size, producer_name=name)
    if outcome == "closed":
        assert raw.closed_by_peer(10)
        return
    if outcome == "receipt":
        assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 0
    else:
        error = raw.expect(T.SEND_ERROR).send_error
        assert error.sequence_id == 0
        assert error.error == pb.NotAllowedError
        assert error.message
    # Either way the connection is still usable.
    raw.send(0, 1, b"small", producer_name=name)
    assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 1
    raw.close()
    reader = client_factory(broker.url).create_reader("big", pulsar.MessageId.earliest)
    expected = ([b"x" * size] if outcome == "receipt" else []) + [b"small"]
    assert [reader.read_next(10000).data() for _ in expected] == expected


def test_official_client_refuses_oversized_message_itself(broker_factory, client_factory):
    broker = broker_factory(f"maxMessageSize={MAX_MESSAGE_SIZE}")
    producer = client_factory(broker.url).create_producer("big", batching_enabled=False)
    with pytest.raises(pulsar.MessageTooBig):
        producer.send(b"x" * (MAX_MESSAGE_SIZE + 1))
    producer.send(b"ok")


@pytest.mark.parametrize(
    ("cmd", "answer"),
    [
        # the coordinator's commands are answered in their own response type (the Java client
        # waits for that): a coordinator this broker does not run, a transaction it never opened
        (T(type=T.NEW_TXN, newTxn=pb.CommandNewTxn(request_id=3, tc_id=7)), "newTxnResponse"),
        (T(type=T.END_TXN, endTxn=pb.CommandEndTxn(request_id=3)), "endTxnResponse"),
        (T(type=T.END_TXN_ON_PARTITION, endTxnOnPartition=pb.CommandEndTxnOnPartition(request_id=3)),
         "endTxnOnPartitionResponse"),
        (T(type=T.WATCH_TOPIC_LIST), "error"),
        (T(type=T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse()), "error"),
    ],
    ids=lambda value: T.Type.Name(value.type) if isinstance(value, T) else "",
)
def test_unsupported_command_gets_an_error(broker, cmd, answer):
    raw = RawClient(broker.url)
    raw.connect()
    raw.command(cmd)
    frame = raw.next_frame()
    assert frame is not None and frame.command.HasField(answer)
    body = getattr(frame.command, answer)
    assert body.HasField("error") and body.message
    # The connection survives: a PING still gets its PONG.
    raw.ping()
    raw.close()


def test_send_for_unknown_producer_closes_connection(broker):
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer("unknown-producer", producer_id=0)
    raw.send(5, 0, b"who am I")
    assert raw.closed_by_peer(10)
    raw.close()


def delayed_send(producer_id: int, sequence_id: int, deliver_at: int) -> tuple[pb.BaseCommand, bytes]:
    metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id,
                                  publish_time=int(time.time() * 1000), deliver_at_time=deliver_at)
    send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    return pb.BaseCommand(type=pb.BaseCommand.SEND, send=send), build_entry(metadata, b"later")


def test_delivery_delay_over_the_maximum_is_refused(broker_factory):
    broker = broker_factory("delayedDeliveryMaxDelayInMillis=5000")
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer("max-delay")
    now = int(time.time() * 1000)
    raw.command(*delayed_send(0, 0, now + 60_000))
    error = raw.expect(pb.BaseCommand.SEND_ERROR).send_error
    assert error.error == pb.NotAllowedError and "5000" in error.message
    raw.command(*delayed_send(0, 1, now + 1_000))
    assert raw.expect(pb.BaseCommand.SEND_RECEIPT).send_receipt.sequence_id == 1
    raw.close()


def _entry_with_raw_metadata(metadata_bytes: bytes, payload: bytes) -> bytes:
    covered = struct.pack(">I", len(metadata_bytes)) + metadata_bytes + payload
    return struct.pack(">HI", 0x0E01, crc32c.crc32c(covered)) + covered


def _metadata(**fields) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="raw", sequence_id=0, publish_time=int(time.time() * 1000), **fields)


POISON = {
    "garbage-metadata": (_entry_with_raw_metadata(b"\xff" * 12, b"payload"), None),
    "metadata-without-required-fields": (_entry_with_raw_metadata(b"\x0a\x01x", b"payload"), None),
    "3-messages-in-1-byte": (build_entry(_metadata(num_messages_in_batch=3), b"x"), 3),
    "2^31-1-messages-in-1-byte": (build_entry(_metadata(num_messages_in_batch=2**31 - 1), b"x"), 2**31 - 1),
    "zero-messages": (build_entry(_metadata(num_messages_in_batch=0), b"x" * 20), 0),
    "compressed-lie": (build_entry(_metadata(num_messages_in_batch=1000, compression=pb.LZ4, uncompressed_size=60),
                                   b"\x00" * 30), 1000),
    "count-disagrees-with-send": (build_entry(_metadata(num_messages_in_batch=2), b"x" * 40), 5),
}


@pytest.mark.parametrize(("entry", "num_messages"), POISON.values(), ids=POISON.keys())
def test_poison_entries_are_refused_at_publish(broker, client_factory, entry, num_messages):
    consumer = client_factory(broker.url).subscribe("poison", "sub", initial_position=EARLIEST)
    raw = RawClient(broker.url)
    raw.connect()
    name = raw.create_producer("poison")
    send = pb.CommandSend(producer_id=0, sequence_id=0)
    if num_messages is not None:
        send.num_messages = num_messages
    raw.command(T(type=T.SEND, send=send), entry)
    error = raw.expect(T.SEND_ERROR).send_error
    assert (error.sequence_id, error.error) == (0, pb.NotAllowedError)
    assert "malformed" in error.message
    raw.send(0, 1, b"good", producer_name=name)
    assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 1
    raw.close()
    assert consumer.receive(timeout_millis=10_000).data() == b"good"


@pytest.mark.parametrize("consumer_type", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Shared],
                         ids=["exclusive", "shared"])
def test_stored_unreadable_entries_are_skipped_not_stalled_on(broker, client_factory, consumer_type):
    """Entries an older broker let in (or a damaged record) are skipped once, logged once,
    counted, and everything around them is delivered."""
    client = client_factory(broker.url)
    client.subscribe("stored-poison", "sub", initial_position=EARLIEST).close()
    producer = client.create_producer("stored-poison", batching_enabled=False)
    producer.send(b"before")
    producer.close()
    client.close()
    broker.stop()

    from magnetar.storage import ManagedLedgerFactory  # noqa: PLC0415

    factory = ManagedLedgerFactory(broker.data_dir)
    ledger = factory.open("public/default/persistent/stored-poison")
    for entry, _ in (POISON["garbage-metadata"], POISON["2^31-1-messages-in-1-byte"]):
        ledger.append_sync(entry)
    ledger.append_sync(build_entry(_metadata(), b"after"))
    factory.close()

    broker.start()
    client = client_factory(broker.url)
    consumer = client.subscribe("stored-poison", "sub", consumer_type=consumer_type)
    got = [consumer.receive(timeout_millis=10_000).data() for _ in range(2)]
    assert got == [b"before", b"after"]
    stats = json.loads(http_get(f"{broker.admin_url}/admin/v2/persistent/public/default/stored-poison/stats")[2])
    assert stats["subscriptions"]["sub"]["unreadableEntriesSkipped"] == 2
    assert broker.log().count("cannot be delivered") == 2
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=300)


def test_a_damaged_record_is_skipped(broker, client_factory):
    client = client_factory(broker.url)
    client.subscribe("damaged", "sub", initial_position=EARLIEST).close()
    producer = client.create_producer("damaged", batching_enabled=False)
    for payload in (b"first", b"middle-record", b"last"):
        producer.send(payload)
    client.close()
    broker.stop()
    (log_file,) = (broker.data_dir / "managed-ledgers").glob("*/*.log")
    data = bytearray(log_file.read_bytes())
    at = data.index(b"middle-record")
    data[at] ^= 0xFF  # the record's checksum no longer matches
    log_file.write_bytes(bytes(data))

    broker.start()
    consumer = client_factory(broker.url).subscribe("damaged", "sub")
    assert [consumer.receive(timeout_millis=10_000).data() for _ in range(2)] == [b"first", b"last"]
    assert broker.log().count("cannot be delivered") == 1


def test_a_foreign_entry_must_hold_what_it_claims(broker):
    """PIP-96 entries: the broker never decodes them, but it reads the count a Kafka batch's
    header states, so nobody can make consumers iterate a million messages out of three."""
    from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: PLC0415 (dev dependency)

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset in range(3):
        builder.append(offset, timestamp=1000 + offset, key=b"k", value=b"v", headers=[])
    records = bytes(builder.build())
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer("kafka-entries")

    def send(sequence_id: int, claimed: int, payload: bytes) -> pb.BaseCommand:
        metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1,
                                      num_messages_in_batch=claimed,
                                      properties=[pb.KeyValue(key="entry.format", value="kafka")])
        raw.command(pb.BaseCommand(type=pb.BaseCommand.SEND, send=pb.CommandSend(
            producer_id=0, sequence_id=sequence_id, num_messages=claimed)), build_entry(metadata, payload))
        frame = raw.next_frame(10)
        assert frame is not None
        return frame.command

    lying = send(0, 1_000_000, records)
    assert lying.type == pb.BaseCommand.SEND_ERROR and "holds 3 messages" in lying.send_error.message
    garbage = send(1, 3, b"\x00" * 70)
    assert garbage.type == pb.BaseCommand.SEND_ERROR and "kafka" in garbage.send_error.message
    assert send(2, 3, records).type == pb.BaseCommand.SEND_RECEIPT  # the dense batch itself is fine
    raw.close()


@pytest.mark.parametrize("kind", ["name", "kafka batch"])
def test_a_pulsar_producer_cannot_pose_as_a_kafka_producer(broker, kind):
    """The Kafka listener names its entries `kafka:<id>:<epoch>` (entryFormat=pulsar) or keeps
    the Kafka batch header (entryFormat=kafka), and after a restart its idempotence recovery
    takes them for that producer's batches: a Pulsar SEND posing so (a name of that form, or a
    Kafka batch naming a producer) is refused, else any writer of the topic could fence a Kafka
    producer out with OUT_OF_ORDER_SEQUENCE_NUMBER."""
    from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: PLC0415 (dev dependency)

    def batch(producer_id: int) -> bytes:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                            base_sequence=0 if producer_id >= 0 else -1, batch_size=1 << 20)
        builder.append(0, timestamp=1000, key=b"k", value=b"v", headers=[])
        return bytes(builder.build())

    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer(f"posing-{kind.replace(' ', '-')}")

    def send(sequence_id: int, producer_name: str, kafka_producer: int | None) -> pb.BaseCommand:
        properties = [] if kafka_producer is None else [pb.KeyValue(key="entry.format", value="kafka")]
        metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id, publish_time=1,
                                      properties=properties)
        payload = b"v" if kafka_producer is None else batch(kafka_producer)
        raw.command(pb.BaseCommand(type=pb.BaseCommand.SEND, send=pb.CommandSend(
            producer_id=0, sequence_id=sequence_id)), build_entry(metadata, payload))
        frame = raw.next_frame(10)
        assert frame is not None
        return frame.command

    try:
        if kind == "name":
            posing, honest = send(0, "kafka:7:0", None), send(1, "kafka-bridge", None)
        else:
            posing, honest = send(0, "raw", 7), send(1, "raw", -1)
        assert posing.type == pb.BaseCommand.SEND_ERROR and posing.send_error.error == pb.NotAllowedError
        assert "Kafka" in posing.send_error.message
        assert honest.type == pb.BaseCommand.SEND_RECEIPT  # the connection and the producer carry on
    finally:
        raw.close()
