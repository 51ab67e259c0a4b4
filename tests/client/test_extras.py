"""What magnetar.client offers beyond the official client: PIP-70 on messages, PIP-191 batches."""

from __future__ import annotations

from magnetar.client import Client, InitialPosition, MessageId
from magnetar.client.connection import ClientConnection
from magnetar.client.raw_reader import RawReader
from magnetar.wire.batch import decode_batch
from magnetar.wire.entry import parse_entry

WORKED_EXAMPLE = [
    {"region": "eu"},
    {"region": "eu"},
    {"region": "eu", "version": "1", "tag": "a"},
    {"region": "eu", "version": "1"},
    {"region": "us", "version": "1"},
    {"region": "us", "version": "2"},
]


def _stored_entries(url, topic, count):
    with ClientConnection(url) as conn:
        reader = RawReader(conn, topic)
        return [parse_entry(reader.read_entry()[1]) for _ in range(count)]


def test_batched_filter_properties_worked_example_at_the_byte_level(shared_broker, topic):
    """PIP-191's example: four batches, each with the extracted properties in its MessageMetadata."""
    client = Client(shared_broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=200,
                                          batched_filter_properties=["region", "version"])
        for i, properties in enumerate(WORKED_EXAMPLE, 1):
            producer.send_async(f"msg{i}".encode(), None, properties=properties)
        producer.flush()
        entries = _stored_entries(shared_broker.service_url, topic, 4)
        batches = []
        for entry in entries:
            metadata = entry.metadata
            messages = decode_batch(entry.payload, metadata.num_messages_in_batch)
            batches.append((
                {kv.key: kv.value for kv in metadata.properties},
                [bytes(m.value) for m in messages],
                [{kv.key: kv.value for kv in m.metadata.properties} for m in messages],
            ))
        assert batches == [
            ({"region": "eu"}, [b"msg1", b"msg2"], WORKED_EXAMPLE[0:2]),
            ({"region": "eu", "version": "1"}, [b"msg3", b"msg4"], WORKED_EXAMPLE[2:4]),
            ({"region": "us", "version": "1"}, [b"msg5"], WORKED_EXAMPLE[4:5]),
            ({"region": "us", "version": "2"}, [b"msg6"], WORKED_EXAMPLE[5:6]),
        ]
        # A consumer still sees each message's own properties, tag included.
        consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
        assert [consumer.receive(10_000).properties() for _ in range(6)] == WORKED_EXAMPLE
    finally:
        client.close()


def test_index_and_broker_publish_time(shared_broker, topic):
    """PIP-70: the broker's per-message index and its publish time, batched or not."""
    client = Client(shared_broker.service_url, operation_timeout_seconds=10)
    try:
        single = client.create_producer(topic)
        for i in range(3):
            single.send(f"s{i}".encode())
        batched = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
        for i in range(5):
            batched.send_async(f"b{i}".encode(), None)
        batched.flush()
        reader = client.create_reader(topic, MessageId.earliest)
        messages = [reader.read_next(10_000) for _ in range(8)]
        assert [m.index() for m in messages] == list(range(8))
        stamps = [m.broker_publish_time() for m in messages]
        assert all(stamp >= m.publish_timestamp() for stamp, m in zip(stamps, messages, strict=True))
    finally:
        client.close()


def test_index_is_none_when_the_broker_does_not_expose_it(broker_factory):
    broker = broker_factory("exposingBrokerEntryMetadataToClientEnabled=false")
    client = Client(broker.url, operation_timeout_seconds=10)
    try:
        client.create_producer("plain").send(b"x")
        msg = client.create_reader("plain", MessageId.earliest).read_next(10_000)
        assert msg.index() is None and msg.broker_publish_time() is None
    finally:
        client.close()
