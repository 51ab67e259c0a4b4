"""`magnetar.client`: the blocking connection and RawReader against a real broker."""

from __future__ import annotations

import socket
import threading

import pytest

from magnetar.client.connection import ClientConnection, PulsarClientError, PulsarServerError, parse_service_url
from magnetar.client.lookup import lookup, partitions_of, topics_of_namespace
from magnetar.client.raw_reader import RawReader
from magnetar.wire.batch import decode_messages
from magnetar.wire.entry import parse_entry, peek_broker_entry_metadata
from magnetar.wire.message_id import EARLIEST, MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

INTERCEPTORS = (
    "brokerEntryMetadataInterceptors=org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)
EXPOSING = "exposingBrokerEntryMetadataToClientEnabled=true"


def _values(entry: bytes) -> list[bytes]:
    parsed = parse_entry(entry)
    return [bytes(m.value) for m in decode_messages(parsed.metadata, parsed.payload, max_size=1 << 20)]


def _send(client, topic, count, **kwargs):
    producer = client.create_producer(topic, **kwargs)
    ids = [producer.send(f"m{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def test_reads_every_entry_with_its_prefix_in_order(broker_factory, client_factory):
    broker = broker_factory(INTERCEPTORS, EXPOSING)
    ids = _send(client_factory(broker.url), "r", 25, batching_enabled=False)
    with ClientConnection(broker.url) as conn:
        reader = RawReader(conn, "persistent://public/default/r", queue_size=4)  # refills many times
        got = [reader.read_entry() for _ in ids]
        assert [(m.ledger_id, m.entry_id) for m, _ in got] == [(i.ledger_id(), i.entry_id()) for i in ids]
        assert [peek_broker_entry_metadata(e).index for _, e in got] == list(range(25))
        assert [v for _, e in got for v in _values(e)] == [f"m{i}".encode() for i in range(25)]
        last = reader.last_message_id()
        assert (last.last.ledger_id, last.last.entry_id) == (ids[-1].ledger_id(), ids[-1].entry_id())
        reader.close()


def test_starts_at_the_given_entry_and_seeks_by_time(broker_factory, client_factory):
    broker = broker_factory(INTERCEPTORS, EXPOSING)
    ids = _send(client_factory(broker.url), "s", 10, batching_enabled=False)
    with ClientConnection(broker.url) as conn:
        start = MessageId(ids[4].ledger_id(), ids[4].entry_id())
        reader = RawReader(conn, "s", start)
        first_id, entry = reader.read_entry()
        assert (first_id.ledger_id, first_id.entry_id) == (start.ledger_id, start.entry_id)
        stamp = peek_broker_entry_metadata(entry).broker_timestamp
        reader.seek(publish_time=stamp + 10**9)  # after everything: nothing to read
        assert not reader.last_message_id().has_more
        reader.seek(publish_time=0)
        assert reader.last_message_id().has_more
        again, _ = reader.read_entry()
        assert (again.ledger_id, again.entry_id) == (ids[0].ledger_id(), ids[0].entry_id())
        reader.seek(message_id=start)
        after_seek, _ = reader.read_entry()
        assert after_seek.entry_id == start.entry_id


def test_lookups_and_refusals(broker_factory, client_factory):
    broker = broker_factory()
    client = client_factory(broker.url)
    _send(client, "plain", 1)
    with ClientConnection(broker.url) as conn:
        assert lookup(conn, "persistent://public/default/plain") == broker.url
        assert partitions_of(conn, "persistent://public/default/plain") == 0
        with pytest.raises(PulsarServerError) as refused:
            partitions_of(conn, "persistent://public/default/absent")  # not created by asking
        assert refused.value.code == pb.TopicNotFound
        with pytest.raises(PulsarServerError, match="TopicNotFound"):
            RawReader(conn, "persistent://public/default/absent", EARLIEST)
        assert "persistent://public/default/plain" in topics_of_namespace(conn, "public/default")
        assert "persistent://public/default/absent" not in topics_of_namespace(conn, "public/default")


def test_bad_urls_and_dead_peers_give_clear_errors():
    assert parse_service_url("pulsar+ssl://h:6652") == ("h", 6652)  # TLS: tests/security
    with pytest.raises(PulsarClientError, match="not a Pulsar service URL"):
        parse_service_url("http://h:8080")
    assert parse_service_url("pulsar://a:1,b:2") == ("a", 1)
    assert parse_service_url("pulsar://a") == ("a", 6650)
    with socket.socket() as server:  # a peer that accepts and never answers CONNECT
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        accepted = []
        thread = threading.Thread(target=lambda: accepted.append(server.accept()[0]))
        thread.start()
        with pytest.raises(PulsarClientError, match="no answer"):
            ClientConnection(f"pulsar://127.0.0.1:{port}", timeout=0.5)
        thread.join()
        accepted[0].close()


def test_batched_entries_count_as_their_messages_for_flow_control(broker_factory, client_factory):
    broker = broker_factory()
    client = client_factory(broker.url)
    producer = client.create_producer("b", batching_max_messages=10, batching_max_publish_delay_ms=50)
    for i in range(200):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    producer.close()
    with ClientConnection(broker.url) as conn:
        reader = RawReader(conn, "b", queue_size=15)  # less than two batches at a time
        values = []
        while len(values) < 200:
            _, entry = reader.read_entry()
            values.extend(int(v) for v in _values(entry))
        assert values == list(range(200))
