"""The broker and encrypted topics: the namespace policy encryption_required (REST, CLI, both
clients, raw SENDs), and what the broker does from metadata alone on encrypted topics
(compaction by key, Key_Shared by key, entry filters on properties), with either client
producing what the other consumes."""

from __future__ import annotations

import json
import subprocess
import sys

import pulsar
import pytest
from admin_http import http
from compaction_helpers import compact, drain, kv
from crypto_keys import rsa_pair
from polling import wait_for
from rawclient import RawClient

import magnetar.client
from magnetar.wire.entry import build_entry
from magnetar.wire.frames import encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
MODULES = {"official": pulsar, "magnetar": magnetar.client}
PAIRS = [("official", "magnetar"), ("magnetar", "official")]
EARLIEST = pulsar.MessageId.earliest


def _client(name: str, url: str, timeout: int = 10):
    if name == "official":
        return pulsar.Client(url, operation_timeout_seconds=timeout,
                             logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    return magnetar.client.Client(url, operation_timeout_seconds=timeout)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return rsa_pair(tmp_path_factory.mktemp("keys"), "k")


def _reader(name: str, pair):
    return MODULES[name].CryptoKeyReader(str(pair.public), str(pair.private))


def _policy(broker, method: str, value: object = None, namespace: str = "public/default") -> tuple[int, object]:
    url = f"{broker.admin_url}/admin/v2/namespaces/{namespace}/encryptionRequired"
    code, _, body = http(method, url, None if value is None else json.dumps(value).encode())
    return code, json.loads(body) if body else None


def test_the_policy_over_rest_and_cli(broker):
    assert _policy(broker, "GET") == (200, False)  # a boolean in Pulsar's Policies: false until set
    assert _policy(broker, "POST", True)[0] == 204
    assert _policy(broker, "GET") == (200, True)
    code, reason = _policy(broker, "POST", "yes")
    assert code == 412 and "encryptionRequired" in reason["reason"]
    assert _policy(broker, "GET", namespace="public/nope")[0] == 404

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url,
                               "namespaces", *args], capture_output=True, text=True, timeout=60, check=False)

    assert admin("set-encryption-required", "public/default", "-d").returncode == 0
    assert admin("get-encryption-required", "public/default").stdout.strip() == "false"
    assert admin("set-encryption-required", "public/default", "--enable").returncode == 0
    assert admin("get-encryption-required", "public/default").stdout.strip() == "true"
    refused = admin("set-encryption-required", "public/default")
    assert refused.returncode != 0 and "--enable/-e" in refused.stderr


@pytest.mark.parametrize("name", list(MODULES))
def test_unencrypted_producers_are_refused_where_encryption_is_required(broker, pair, name):
    client = _client(name, broker.url, timeout=2)
    try:
        before = client.create_producer("required", batching_enabled=False)
        before.send(b"plain, before")
        assert _policy(broker, "POST", True)[0] == 204
        with pytest.raises(MODULES[name].Timeout):  # MetadataError is retried, as from Pulsar's broker
            client.create_producer("required")
        producer = client.create_producer("required", encryption_key="k", crypto_key_reader=_reader(name, pair))
        producer.send(b"sealed")
        consumer = client.subscribe("required", "sub", initial_position=MODULES[name].InitialPosition.Earliest,
                                    crypto_key_reader=_reader(name, pair))
        assert [consumer.receive(10_000).data() for _ in range(2)] == [b"plain, before", b"sealed"]
        assert _policy(broker, "DELETE")[0] == 204
        client.create_producer("required").send(b"plain again")
        assert consumer.receive(10_000).data() == b"plain again"
    finally:
        client.close()


def _send(raw: RawClient, sequence_id: int, encrypted: bool) -> None:
    metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
    if encrypted:
        metadata.encryption_keys.add(key="k", value=b"\x01" * 256)
        metadata.encryption_param = b"\x02" * 12
    send = pb.CommandSend(producer_id=0, sequence_id=sequence_id)
    raw.write(encode_payload_command(T(type=T.SEND, send=send), build_entry(metadata, b"\x03" * 40)))


def test_a_send_without_encryption_keys_is_refused_from_its_metadata(broker):
    """A producer that says it encrypts but sends a plain message gets Pulsar's SEND_ERROR;
    the connection stays up and its sealed messages are stored. The payload is never read:
    these ones are not even valid ciphertext."""
    assert _policy(broker, "POST", True)[0] == 204
    raw = RawClient(broker.url)
    try:
        raw.connect()
        raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic="persistent://public/default/raw",
                                                                   producer_id=0, request_id=1)))
        error = raw.expect(T.ERROR).error
        assert (error.error, error.message) == (pb.MetadataError,
                                                "Encryption is required in persistent://public/default/raw")
        raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic="persistent://public/default/raw",
                                                                   producer_id=0, request_id=2, encrypted=True)))
        raw.expect(T.PRODUCER_SUCCESS)
        _send(raw, 0, encrypted=False)
        refused = raw.expect(T.SEND_ERROR).send_error
        assert (refused.error, refused.message, refused.sequence_id) == (pb.MetadataError,
                                                                         "Messages must be encrypted", 0)
        _send(raw, 1, encrypted=True)
        assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 1
        raw.ping()
    finally:
        raw.close()


@pytest.mark.parametrize(("producing", "consuming"), PAIRS)
def test_compaction_keeps_the_latest_sealed_message_per_key(broker, pair, producing, consuming):
    writer, reader_client = _client(producing, broker.url), _client(consuming, broker.url)
    try:
        producer = writer.create_producer("enc", encryption_key="k", crypto_key_reader=_reader(producing, pair),
                                          batching_enabled=False)
        for key, value in [("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"4"), ("c", None)]:
            producer.send(value, partition_key=key)
        compact(broker.admin_url, "enc")
        reader = reader_client.create_reader("enc", EARLIEST, is_read_compacted=True,
                                             crypto_key_reader=_reader(consuming, pair))
        assert kv(drain(reader)) == [("b", b"2"), ("a", b"3")]
    finally:
        writer.close()
        reader_client.close()


@pytest.mark.parametrize(("producing", "consuming"), PAIRS)
def test_key_shared_gives_each_key_to_one_consumer(broker, pair, producing, consuming):
    writer, reader_client = _client(producing, broker.url), _client(consuming, broker.url)
    try:
        module = MODULES[consuming]
        consumers = [reader_client.subscribe("enc-ks", "ks", consumer_type=module.ConsumerType.KeyShared,
                                             crypto_key_reader=_reader(consuming, pair), consumer_name=f"c{i}")
                     for i in range(3)]
        producer = writer.create_producer("enc-ks", encryption_key="k", crypto_key_reader=_reader(producing, pair),
                                          batching_enabled=True, batching_type=MODULES[producing].BatchingType.KeyBased)
        for n in range(60):
            producer.send_async(b"%d" % n, None, partition_key=f"key-{n % 6}")
        producer.flush()
        owners: dict[str, set[int]] = {}
        received: list[bytes] = []

        def take_all() -> bool:
            for index, consumer in enumerate(consumers):
                try:
                    message = consumer.receive(50)
                except Exception:
                    continue
                owners.setdefault(message.partition_key(), set()).add(index)
                received.append(message.data())
                consumer.acknowledge(message)
            return len(received) == 60

        assert wait_for(take_all, timeout=30)
        assert sorted(received) == sorted(b"%d" % n for n in range(60))
        assert all(len(held) == 1 for held in owners.values()) and len(owners) == 6
    finally:
        writer.close()
        reader_client.close()


@pytest.mark.parametrize(("producing", "consuming"), PAIRS)
def test_entry_filters_judge_sealed_messages_by_their_properties(broker_factory, pair, producing, consuming):
    broker = broker_factory("entryFilterNames=selector")
    writer, reader_client = _client(producing, broker.url), _client(consuming, broker.url)
    try:
        consumer = reader_client.subscribe("enc-filter", "sub", properties={"selector": "n >= 10 AND n < 20"},
                                           crypto_key_reader=_reader(consuming, pair),
                                           initial_position=MODULES[consuming].InitialPosition.Earliest)
        producer = writer.create_producer("enc-filter", encryption_key="k", crypto_key_reader=_reader(producing, pair),
                                          batching_enabled=False)
        for n in range(30):
            producer.send(b"%d" % n, properties={"n": str(n)})
        producer.send(b"end", properties={"n": "19"})
        got = [consumer.receive(10_000).data() for _ in range(11)]
        assert got == [b"%d" % n for n in range(10, 20)] + [b"end"]
    finally:
        writer.close()
        reader_client.close()


def test_the_policy_applies_to_a_producer_already_sending(broker):
    """Turning encryption_required on (and off) reaches the next SEND of a producer that was
    created before: what each SEND is checked against is re-read on every policy change."""
    raw = RawClient(broker.url)
    try:
        raw.connect()
        raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic="persistent://public/default/raw-live",
                                                                   producer_id=0, request_id=1, encrypted=True)))
        raw.expect(T.PRODUCER_SUCCESS)
        _send(raw, 0, encrypted=False)
        assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 0
        assert _policy(broker, "POST", True)[0] == 204
        _send(raw, 1, encrypted=False)
        assert raw.expect(T.SEND_ERROR).send_error.sequence_id == 1
        assert _policy(broker, "POST", False)[0] == 204
        _send(raw, 2, encrypted=False)
        assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == 2
    finally:
        raw.close()
        _policy(broker, "POST", False)
