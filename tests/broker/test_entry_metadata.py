"""Broker entry metadata (PIP-70): stamping, index continuity, seek by broker time, exposure, TTL."""

from __future__ import annotations

import json
import random
import time
from datetime import datetime

import pulsar
import pytest
from admin_http import http, http_get
from polling import wait_for
from rawclient import RawClient
from standalone import NO_ENTRY_METADATA

from magnetar.client import Client, MessageId
from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import build_entry, parse_entry, parse_message_metadata, peek_broker_entry_metadata
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

T = pb.BaseCommand
PULSAR_INTERCEPTORS = (
    "brokerEntryMetadataInterceptors="
    "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)


def stored_entries(data_dir, topic: str) -> list[tuple[tuple[int, int], bytes]]:
    """Every durable entry of a topic, read straight from the data dir (read-only, broker may run)."""
    factory = ManagedLedgerFactory(data_dir, read_only=True)
    try:
        ledger = factory.open(TopicName.parse(topic).storage_name)
        first = ledger.first_position
        return [] if first is None else [(tuple(p), d) for p, d in ledger.read_entries(first, 1_000_000)]
    finally:
        factory.close()


def message_count(entry: bytes) -> int:
    md = parse_message_metadata(entry)
    return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1


def wait_next_millisecond() -> None:
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 <= start + 1:
        time.sleep(0.0005)


class SkewedProducer:
    """A raw producer whose publish_time is whatever the test says (a skewed client clock)."""

    def __init__(self, url: str, topic: str) -> None:
        self.raw = RawClient(url)
        self.raw.connect()
        self.raw.create_producer(topic)
        self.sequence = 0

    def send(self, publish_time: int, values: list[bytes]) -> None:
        md = pb.MessageMetadata(producer_name="skewed", sequence_id=self.sequence, publish_time=publish_time)
        send = pb.CommandSend(producer_id=0, sequence_id=self.sequence)
        if len(values) == 1:
            payload = values[0]
        else:
            md.num_messages_in_batch = len(values)
            send.num_messages = len(values)
            payload = encode_batch([(pb.SingleMessageMetadata(payload_size=0), v) for v in values])
        self.raw.command(T(type=T.SEND, send=send), build_entry(md, payload))
        assert self.raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == self.sequence
        self.sequence += 1

    def close(self) -> None:
        self.raw.close()


def send_groups(client, topic: str, sizes: list[int]) -> None:
    """One entry per group: a batch of `size` messages, or a plain message for size 1."""
    batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                     batching_max_publish_delay_ms=60_000)
    plain = client.create_producer(topic, batching_enabled=False)
    for size in sizes:
        if size == 1:
            plain.send(b"single")
            continue
        for i in range(size):
            batched.send_async(f"b{i}".encode(), None)
        batched.flush()
    batched.close()
    plain.close()


def test_index_is_continuous_across_rollover_and_restart(broker_factory, client_factory):
    topic = "persistent://public/default/index-continuity"
    broker = broker_factory(PULSAR_INTERCEPTORS, "managedLedgerMaxEntriesPerLedger=3",
                            "managedLedgerMinLedgerRolloverTimeMinutes=0")
    send_groups(client_factory(broker.url), topic, [1, 3, 5, 1, 2, 7, 1])
    broker.restart()
    send_groups(client_factory(broker.url), topic, [4, 1, 6, 1])
    broker.stop()

    entries = stored_entries(broker.data_dir, topic)
    counts = [message_count(data) for _, data in entries]
    assert counts == [1, 3, 5, 1, 2, 7, 1, 4, 1, 6, 1]
    assert len({ledger for (ledger, _), _ in entries}) >= 4  # several rollovers
    prefixes = [peek_broker_entry_metadata(data) for _, data in entries]
    indexes = [bem.index for bem in prefixes]
    expected, total = [], -1
    for count in counts:
        total += count
        expected.append(total)
    assert indexes == expected
    stamps = [bem.broker_timestamp for bem in prefixes]
    assert stamps == sorted(stamps)


def test_standalone_stamps_and_exposes_by_default_and_pulsars_behaviour_is_one_key_away(broker_factory):
    """`magnetar standalone` turns PIP-70 on (unlike broker.conf's defaults), so Message.index()
    and the Spark source's offsets work on the broker a newcomer starts; Pulsar's way is -c."""
    default = broker_factory()
    pulsars = broker_factory(*NO_ENTRY_METADATA)
    assert "exposingBrokerEntryMetadataToClientEnabled=true [standalone default]" in default.log()
    seen = []
    for broker in (default, pulsars):
        client = Client(broker.url, operation_timeout_seconds=10)
        try:
            producer = client.create_producer("defaults", batching_enabled=True, batching_max_publish_delay_ms=50)
            for i in range(3):
                producer.send_async(f"{i}".encode(), None)
            producer.flush()
            reader = client.create_reader("defaults", MessageId.earliest)
            seen.append([(m.index(), m.broker_publish_time() is not None) for m in
                         (reader.read_next(10_000) for _ in range(3))])
        finally:
            client.close()
        stored = [peek_broker_entry_metadata(d) for _, d in stored_entries(broker.data_dir, "defaults")]
        assert all((bem is not None) == (broker is default) for bem in stored)
    assert seen == [[(0, True), (1, True), (2, True)], [(None, False)] * 3]


def test_index_base_is_configurable(broker_factory, client_factory):
    broker = broker_factory(PULSAR_INTERCEPTORS, "brokerEntryMetadataIndexBase=1000")
    send_groups(client_factory(broker.url), "index-base", [1, 4])
    entries = stored_entries(broker.data_dir, "index-base")
    assert [peek_broker_entry_metadata(d).index for _, d in entries] == [1000, 1004]


def test_short_interceptor_names_and_unknown_name(broker_factory, client_factory, tmp_path):
    broker = broker_factory("brokerEntryMetadataInterceptors=AppendIndexMetadataInterceptor")
    send_groups(client_factory(broker.url), "short-names", [1])
    (_, data), = stored_entries(broker.data_dir, "short-names")
    bem = peek_broker_entry_metadata(data)
    assert bem.HasField("index") and not bem.HasField("broker_timestamp")
    with pytest.raises(RuntimeError, match="unknown interceptor"):
        broker_factory("brokerEntryMetadataInterceptors=NoSuchInterceptor")


def seek_and_read_first(reader, timestamp: int) -> bytes | None:
    reader.seek(timestamp)
    if not reader.has_message_available():
        return None
    return reader.read_next(timeout_millis=10000).data()


def first_value(entry: bytes) -> bytes:
    parsed = parse_entry(entry)
    if parsed.metadata.HasField("num_messages_in_batch"):
        return b"e" + bytes(parsed.payload).split(b"e", 1)[1].split(b"-")[0] + b"-0"
    return bytes(parsed.payload)


def test_seek_by_time_follows_broker_time_not_skewed_clocks(broker_factory, client_factory):
    topic = "persistent://public/default/skewed-seek"
    broker = broker_factory(PULSAR_INTERCEPTORS, "managedLedgerMaxEntriesPerLedger=4",
                            "managedLedgerMinLedgerRolloverTimeMinutes=0")
    producer = SkewedProducer(broker.url, topic)
    rng = random.Random(7)
    now = int(time.time() * 1000)
    for entry in range(20):
        size = rng.choice([1, 1, 3])
        values = [f"e{entry}-{i}".encode() for i in range(size)]
        producer.send(now + rng.randint(-3_600_000, 3_600_000), values)  # clocks up to an hour off
        wait_next_millisecond()
    producer.close()

    entries = stored_entries(broker.data_dir, topic)
    stamps = [peek_broker_entry_metadata(d).broker_timestamp for _, d in entries]
    publish = [parse_message_metadata(d).publish_time for _, d in entries]
    assert stamps == sorted(stamps) and publish != sorted(publish)
    reader = client_factory(broker.url).create_reader(topic, pulsar.MessageId.earliest)
    for target in (stamps[0], stamps[5], stamps[5] + 1, stamps[13], stamps[-1]):
        expected = next(i for i, stamp in enumerate(stamps) if stamp >= target)
        assert seek_and_read_first(reader, target) == f"e{expected}-0".encode(), target
    assert seek_and_read_first(reader, stamps[0] - 10_000) == b"e0-0"
    assert seek_and_read_first(reader, stamps[-1] + 10_000) is None


def test_seek_by_time_on_topic_with_and_without_prefixes(broker_factory, client_factory, tmp_path):
    topic = "persistent://public/default/mixed-prefix"
    data_dir = tmp_path / "mixed"
    broker = broker_factory(*NO_ENTRY_METADATA, data_dir=data_dir)
    producer = SkewedProducer(broker.url, topic)
    for i in range(5):  # no interceptor: the honest client clock is what a seek can use
        producer.send(int(time.time() * 1000), [f"old-{i}".encode()])
        wait_next_millisecond()
    producer.close()
    broker.stop()
    broker = broker_factory(PULSAR_INTERCEPTORS, data_dir=data_dir)
    producer = SkewedProducer(broker.url, topic)
    for i in range(5):
        producer.send(1, [f"new-{i}".encode()])  # a client clock stuck in 1970
        wait_next_millisecond()
    producer.close()

    entries = stored_entries(data_dir, topic)
    times = [
        bem.broker_timestamp if (bem := peek_broker_entry_metadata(d)) else parse_message_metadata(d).publish_time
        for _, d in entries
    ]
    assert [peek_broker_entry_metadata(d) is None for _, d in entries] == [True] * 5 + [False] * 5
    reader = client_factory(broker.url).create_reader(topic, pulsar.MessageId.earliest)
    assert seek_and_read_first(reader, times[2]) == b"old-2"
    assert seek_and_read_first(reader, times[6]) == b"new-1"
    assert seek_and_read_first(reader, times[9] + 1) is None


def test_has_message_available_agrees_with_read_next_after_time_seek(broker_factory, client_factory):
    broker = broker_factory(PULSAR_INTERCEPTORS)
    client = client_factory(broker.url)
    producer = client.create_producer("hma-seek")
    for i in range(6):
        producer.send(f"{i}".encode())
        wait_next_millisecond()
    stamps = [peek_broker_entry_metadata(d).broker_timestamp for _, d in stored_entries(broker.data_dir, "hma-seek")]
    reader = client.create_reader("hma-seek", pulsar.MessageId.latest)
    for target, expected in ((stamps[3], [b"3", b"4", b"5"]), (0, [f"{i}".encode() for i in range(6)]),
                             (stamps[-1] + 60_000, [])):
        reader.seek(target)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(timeout_millis=10000).data())
        assert got == expected
        with pytest.raises(pulsar.Timeout):
            reader.read_next(timeout_millis=300)


def raw_message_payload(url: str, topic: str, *, announce: bool) -> bytes:
    raw = RawClient(url)
    flags = pb.FeatureFlags(supports_broker_entry_metadata=announce)
    raw.command(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="raw", protocol_version=20,
                                                            feature_flags=flags)))
    raw.expect(T.CONNECTED)
    raw.command(T(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription=f"raw-{announce}", subType=pb.CommandSubscribe.Exclusive, consumer_id=1,
        request_id=1, initialPosition=pb.CommandSubscribe.Earliest)))
    raw.expect(T.SUCCESS)
    raw.command(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=10)))
    frame = raw.next_frame()
    raw.close()
    assert frame is not None and frame.command.type == T.MESSAGE
    return frame.payload


@pytest.mark.parametrize("exposing", [True, False])
def test_exposure_to_clients(broker_factory, client_factory, exposing):
    broker = broker_factory(PULSAR_INTERCEPTORS, f"exposingBrokerEntryMetadataToClientEnabled={exposing}")
    client = client_factory(broker.url)
    topic = f"exposure-{exposing}"
    consumer = client.subscribe(topic, "official", initial_position=pulsar.InitialPosition.Earliest)
    send_groups(client, topic, [1, 5])
    got = []
    for _ in range(6):
        msg = consumer.receive(timeout_millis=10000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    assert got == [b"single", b"b0", b"b1", b"b2", b"b3", b"b4"]
    assert (peek_broker_entry_metadata(raw_message_payload(broker.url, topic, announce=True)) is not None) == exposing
    assert peek_broker_entry_metadata(raw_message_payload(broker.url, topic, announce=False)) is None


def test_admin_examine_and_get_message_show_entry_metadata(broker_factory, client_factory):
    broker = broker_factory(PULSAR_INTERCEPTORS)
    client = client_factory(broker.url)
    before = int(time.time() * 1000)
    producer = client.create_producer("admin-bem", batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), properties={"k": str(i)}) for i in range(3)]
    base = f"{broker.admin_url}/admin/v2/persistent/public/default/admin-bem"
    status, headers, body = http_get(f"{base}/examinemessage?initialPosition=earliest&messagePosition=1")
    assert status == 200 and body == b"v0"
    assert headers["X-Pulsar-Broker-Entry-METADATA-index"] == "0"
    assert headers["X-Pulsar-PROPERTY-k"] == "0"
    stamp = headers["X-Pulsar-Broker-Entry-METADATA-timestamp"]
    assert datetime.fromisoformat(stamp).timestamp() * 1000 >= before - 1
    status, headers, body = http_get(f"{base}/ledger/{ids[2].ledger_id()}/entry/{ids[2].entry_id()}")
    assert status == 200 and body == b"v2"
    assert headers["X-Pulsar-Broker-Entry-METADATA-index"] == "2"
    assert headers["X-Pulsar-Message-ID"] == f"{ids[2].ledger_id()}:{ids[2].entry_id()}"
    status, _, body = http_get(f"{base}/examinemessage?initialPosition=latest&messagePosition=1")
    assert body == b"v2"
    assert http_get(f"{base}/examinemessage?messagePosition=99")[0] == 404
    assert http_get(f"{base}/ledger/{ids[2].ledger_id()}/entry/999")[0] == 404
    assert http_get(f"{broker.admin_url}/admin/v2/persistent/public/default/no-such-topic/stats")[0] == 404


def backlog(broker, topic: str, subscription: str) -> int:
    _, _, body = http_get(f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats")
    return json.loads(body)["subscriptions"][subscription]["msgBacklog"]


def test_message_ttl_expires_backlog(broker_factory, client_factory):
    broker = broker_factory(PULSAR_INTERCEPTORS, "ttlDurationDefaultInSeconds=1",
                            "messageExpiryCheckIntervalInMinutes=0.005")
    client = client_factory(broker.url)
    client.subscribe("ttl", "sub").close()
    producer = client.create_producer("ttl")
    for i in range(5):
        producer.send(f"{i}".encode())
    assert backlog(broker, "ttl", "sub") == 5
    assert wait_for(lambda: backlog(broker, "ttl", "sub") == 0)
    producer.send(b"fresh")
    consumer = client.subscribe("ttl", "sub")
    assert consumer.receive(timeout_millis=10000).data() == b"fresh"


def test_per_topic_ttl_through_admin(broker_factory, client_factory):
    broker = broker_factory("messageExpiryCheckIntervalInMinutes=0.005")
    client = client_factory(broker.url)
    client.subscribe("topic-ttl", "sub").close()
    producer = client.create_producer("topic-ttl")
    producer.send(b"x")
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/topic-ttl/messageTTL?messageTTL=1"
    assert http("POST", url)[0] == 204
    assert wait_for(lambda: backlog(broker, "topic-ttl", "sub") == 0)
