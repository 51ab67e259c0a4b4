"""Compaction with the official client's other faces: encryption, TableView, partitioned
topics, seeks on the compacted view."""

from __future__ import annotations

import time

import pulsar
import pytest
from admin_http import http
from compaction_helpers import compact, drain, kv, status, topic_path
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from test_compaction import batched_producer, compacted_reader, send_batch

EARLIEST = pulsar.MessageId.earliest


@pytest.fixture
def key_reader(tmp_path) -> pulsar.CryptoKeyReader:
    """A test RSA key pair, made here, as PEM files."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = tmp_path / "private.pem"
    public = tmp_path / "public.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return pulsar.CryptoKeyReader(str(public), str(private))


def test_encrypted_messages_compact_by_key(broker, client_factory, key_reader):
    client = client_factory(broker.url)
    producer = client.create_producer("enc", encryption_key="test", crypto_key_reader=key_reader)
    for key, value in [("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"4"), ("c", None)]:
        producer.send(value, partition_key=key)
    compact(broker.admin_url, "enc")
    reader = client.create_reader("enc", EARLIEST, is_read_compacted=True, crypto_key_reader=key_reader)
    assert kv(drain(reader)) == [("b", b"2"), ("a", b"3")]


def test_encrypted_batch_is_kept_whole(broker, client_factory, key_reader):
    client = client_factory(broker.url)
    producer = batched_producer(client, "enc-batch", encryption_key="test", crypto_key_reader=key_reader)
    send_batch(producer, [("a", b"1"), ("a", b"2"), ("b", b"3"), ("b", None)])
    compact(broker.admin_url, "enc-batch")
    reader = client.create_reader("enc-batch", EARLIEST, is_read_compacted=True, crypto_key_reader=key_reader)
    got = drain(reader)
    assert [m.data() for m in got] == [b"1", b"2", b"3", b""]
    assert got[-1].message_id().batch_index() == 3


def test_table_view_follows_updates_and_tombstones(broker, client_factory):
    client = client_factory(broker.url)
    producer = client.create_producer("table")
    for i in range(20):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 4}")
    producer.send(None, partition_key="k3")
    compact(broker.admin_url, "table")
    producer.send(b"after", partition_key="k0")
    view = client.create_table_view("table")
    assert view.get("k0") == b"after"
    assert view.get("k1") == b"v17"
    assert view.get("k3") is None
    assert len(view) == 3
    producer.send(None, partition_key="k1")
    producer.send(b"late", partition_key="k2")
    deadline = time.monotonic() + 10
    while (view.get("k1") is not None or view.get("k2") != b"late") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert view.get("k1") is None and view.get("k2") == b"late"
    view.close()


def test_partitioned_topic_compacts_every_partition(broker, client_factory):
    url = topic_path(broker.admin_url, "parts")
    assert http("PUT", url + "/partitions", b"3")[0] == 204
    client = client_factory(broker.url)
    producer = client.create_producer("parts")
    for i in range(60):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 6}")
    assert http("PUT", url + "/compaction", b"")[0] == 204
    deadline = time.monotonic() + 60
    while status(broker.admin_url, "parts")["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status(broker.admin_url, "parts")["status"] == "SUCCESS"
    for i in range(3):
        assert status(broker.admin_url, f"parts-partition-{i}")["status"] == "SUCCESS"
    consumer = client.subscribe("parts", "c", is_read_compacted=True, initial_position=pulsar.InitialPosition.Earliest)
    got = {}
    while True:
        try:
            msg = consumer.receive(2000)
        except pulsar.Timeout:
            break
        got.setdefault(msg.partition_key(), []).append(msg.data())
    assert got == {f"k{k}": [f"v{54 + k}".encode()] for k in range(6)}


def test_seek_by_id_and_time_on_the_compacted_view(broker, client_factory):
    client = client_factory(broker.url)
    producer = client.create_producer("seek")
    ids = []
    for i in range(10):
        ids.append(producer.send(f"v{i}".encode(), partition_key=f"k{i % 5}"))
        time.sleep(0.002)
    compact(broker.admin_url, "seek")
    reader = compacted_reader(client, "seek")
    assert [m.data() for m in drain(reader)] == [f"v{i}".encode() for i in range(5, 10)]
    reader.seek(ids[2])  # not retained: the compacted view resumes at the next retained one
    assert reader.read_next(5000).data() in (b"v5", b"v6")
    reader.seek(ids[7])
    assert [m.data() for m in drain(reader)][-1] == b"v9"
    published = client.create_reader("seek", EARLIEST).read_next(5000)  # any message's time
    reader.seek(published.publish_timestamp() - 1)  # before everything: the whole compacted view
    assert [m.data() for m in drain(reader)] == [f"v{i}".encode() for i in range(5, 10)]
