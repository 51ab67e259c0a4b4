"""End-to-end encryption against the official client (pulsar-client 3.13) through a broker:
its producers to our consumers and ours to its, every codec, batched, chunked, several keys,
rotated keys, and what each crypto_failure_action does with a message no key opens.

The official Python client can hold one RSA key pair (CryptoKeyReader(public, private), its
only reader) and one key name; magnetar.client's reader can be subclassed for more
(tests.crypto_keys.NamedKeys)."""

from __future__ import annotations

import os
import random
import uuid

import pulsar
import pytest
from crypto_keys import KeyPair, NamedKeys, ec_pair, rsa_pair
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import magnetar.client
import magnetar.testing
from magnetar.admin_client import AdminClient
from magnetar.client import CryptoKeyReader, EncryptionKeyInfo
from magnetar.client.connection import ClientConnection
from magnetar.client.crypto import message_crypto
from magnetar.client.raw_reader import RawReader
from magnetar.wire.batch import decode_batch
from magnetar.wire.compression import decompress
from magnetar.wire.entry import parse_entry

CODECS = ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"]
PAIRS = [(magnetar.client, pulsar), (pulsar, magnetar.client)]
PAIR_IDS = ["ours-to-official", "official-to-ours"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict[str, KeyPair]:
    directory = tmp_path_factory.mktemp("keys")
    return {name: rsa_pair(directory, name) for name in ("a", "b", "c")} | {"ec": ec_pair(directory, "ec")}


def _client(module, url):
    if module is pulsar:
        return pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    return module.Client(url, operation_timeout_seconds=10)


def _reader(module, pair: KeyPair | None):
    return None if pair is None else module.CryptoKeyReader(str(pair.public), str(pair.private))


def _values(rng: random.Random, count: int) -> list[bytes]:
    return [rng.randbytes(rng.choice((0, 1, 17, 300, 2000))) if i % 3 else b"text %d " % i * rng.randint(1, 50)
            for i in range(count)]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
@pytest.mark.parametrize(("producing", "consuming"), PAIRS, ids=PAIR_IDS)
def test_every_codec_both_ways(shared_broker, topic, pairs, codec, batching, producing, consuming):
    rng = random.Random(f"{codec}{batching}{producing.__name__}")
    producer_client, consumer_client = _client(producing, shared_broker.service_url), \
        _client(consuming, shared_broker.service_url)
    try:
        consumer = consumer_client.subscribe(topic, "sub", crypto_key_reader=_reader(consuming, pairs["a"]))
        producer = producer_client.create_producer(
            topic, encryption_key="client-rsa.pem", crypto_key_reader=_reader(producing, pairs["a"]),
            batching_enabled=batching, batching_max_publish_delay_ms=20,
            compression_type=getattr(producing.CompressionType, codec))
        values = _values(rng, 30)
        for i, value in enumerate(values):
            producer.send_async(value, None, properties={"n": str(i)}, partition_key=f"key-{i % 4}")
        producer.flush()
        got = [consumer.receive(10_000) for _ in values]
        assert [m.data() for m in got] == values
        assert [m.properties() for m in got] == [{"n": str(i)} for i in range(30)]
        assert [m.partition_key() for m in got] == [f"key-{i % 4}" for i in range(30)]
        contexts = [m.encryption_context() for m in got]
        assert all(c is not None and not c.is_decryption_failed() for c in contexts)
        assert {k.key for wrapped in (c.keys() for c in contexts) for k in wrapped} == {"client-rsa.pem"}
    finally:
        producer_client.close()
        consumer_client.close()


@pytest.fixture(scope="module")
def small_broker():
    """Entries of at most 64 KiB, so a message of a few hundred KiB comes in chunks."""
    with magnetar.testing.standalone({"maxMessageSize": 65536}) as broker:
        yield broker


@pytest.mark.parametrize("codec", ["NONE", "ZSTD"])
@pytest.mark.parametrize(("producing", "consuming"), PAIRS, ids=PAIR_IDS)
def test_chunked_both_ways(small_broker, pairs, codec, producing, consuming):
    topic = f"persistent://public/default/chunks-{uuid.uuid4().hex[:8]}"
    producer_client, consumer_client = _client(producing, small_broker.service_url), \
        _client(consuming, small_broker.service_url)
    try:
        consumer = consumer_client.subscribe(topic, "sub", crypto_key_reader=_reader(consuming, pairs["b"]))
        producer = producer_client.create_producer(
            topic, encryption_key="k", crypto_key_reader=_reader(producing, pairs["b"]), chunking_enabled=True,
            compression_type=getattr(producing.CompressionType, codec))
        values = [os.urandom(300_000), b"compressible " * 30_000, b"small"]
        for value in values:
            producer.send(value)
        got = [consumer.receive(10_000) for _ in values]
        assert [m.data() for m in got] == values
        for message in got:
            consumer.acknowledge(message)
    finally:
        producer_client.close()
        consumer_client.close()
    with ClientConnection(small_broker.service_url) as conn:
        reader = RawReader(conn, topic)
        metadata = [parse_entry(reader.read_entry()[1]).metadata for _ in range(4)]
    assert all(m.encryption_keys and len(m.encryption_param) == 12 for m in metadata)
    assert len({m.encryption_param for m in metadata}) == 4  # every chunk sealed on its own


def test_several_keys_each_consumer_holding_one(shared_broker, topic, pairs):
    ours = magnetar.client.Client(shared_broker.service_url)
    official = _client(pulsar, shared_broker.service_url)
    try:
        holding_a = official.subscribe(topic, "official-a", crypto_key_reader=_reader(pulsar, pairs["a"]))
        holding_b = official.subscribe(topic, "official-b", crypto_key_reader=_reader(pulsar, pairs["b"]))
        ours_ec = ours.subscribe(topic, "ours-ec", crypto_key_reader=NamedKeys({"ec-key": pairs["ec"]}))
        holding_c = official.subscribe(topic, "official-c", crypto_key_reader=_reader(pulsar, pairs["c"]))
        producer = ours.create_producer(topic, encryption_key=["a-key", "b-key", "ec-key"], batching_enabled=True,
                                        crypto_key_reader=NamedKeys({"a-key": pairs["a"], "b-key": pairs["b"],
                                                                     "ec-key": pairs["ec"]}))
        values = [b"to three keys %d" % i for i in range(10)]
        for value in values:
            producer.send_async(value, None)
        producer.flush()
        for consumer in (holding_a, holding_b, ours_ec):
            got = [consumer.receive(10_000) for _ in values]
            assert [m.data() for m in got] == values
            wrapped = got[0].encryption_context().keys()
            assert [k.key for k in wrapped] == ["a-key", "b-key", "ec-key"]
        ours.create_producer(topic).send(b"plain")  # the marker: what comes first to a consumer of no key
        assert holding_c.receive(10_000).data() == b"plain"
    finally:
        ours.close()
        official.close()


def _open_later(message, pair: KeyPair) -> list[bytes]:
    """What an application does with a CONSUMEd message: the data key from the context, then
    AES-GCM, decompression and the batch, by hand."""
    context = message.encryption_context()
    private = serialization.load_pem_private_key(pair.private_pem(), None)
    oaep = padding.OAEP(padding.MGF1(hashes.SHA1()), hashes.SHA1(), None)
    data_key = private.decrypt(context.keys()[0].value, oaep)
    plain = AESGCM(data_key).decrypt(context.param(), message.data(), None)
    codec = int(context.compression_type())
    if codec:
        plain = decompress(codec, plain, context.uncompressed_message_size(), max_size=1 << 20)
    if context.batch_size() < 0:
        return [plain]
    return [bytes(m.value) for m in decode_batch(plain, context.batch_size())]


@pytest.mark.parametrize("holder", ["no-reader", "wrong-key"])
@pytest.mark.parametrize("action", ["FAIL", "DISCARD", "CONSUME"])
def test_a_consumer_without_the_key(shared_broker, topic, pairs, api, action, holder):
    """FAIL: not delivered and left unacknowledged, so a consumer with the key gets them later;
    DISCARD: acknowledged away; CONSUME: delivered sealed, with what opening it later takes.
    A plain message sent after them tells when they have been passed over."""
    ours = magnetar.client.Client(shared_broker.service_url)
    client = api.client()
    try:
        kwargs = {"crypto_failure_action": getattr(api.module.ConsumerCryptoFailureAction, action)}
        if holder == "wrong-key":
            kwargs["crypto_key_reader"] = _reader(api.module, pairs["c"])
        consumer = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared, **kwargs)
        sealing = _reader(magnetar.client, pairs["a"])
        batched = ours.create_producer(topic, encryption_key="k", crypto_key_reader=sealing, batching_enabled=True,
                                       compression_type=magnetar.client.CompressionType.LZ4)
        sealed = [b"batched %d" % i for i in range(3)]
        for value in sealed:
            batched.send_async(value, None)
        batched.flush()
        single = ours.create_producer(topic, encryption_key="k", crypto_key_reader=sealing)
        single.send(b"single")
        plain = ours.create_producer(topic)
        plain.send(b"marker")
        if action == "CONSUME":
            whole_batch, alone = consumer.receive(10_000), consumer.receive(10_000)
            assert whole_batch.encryption_context().is_decryption_failed()
            assert whole_batch.encryption_context().batch_size() == 3 and whole_batch.message_id().batch_index() == -1
            assert _open_later(whole_batch, pairs["a"]) == sealed
            assert _open_later(alone, pairs["a"]) == [b"single"]
            consumer.acknowledge(whole_batch)
            consumer.acknowledge(alone)
        marker = consumer.receive(10_000)
        assert marker.data() == b"marker"
        consumer.acknowledge(marker)
        consumer.close()
        plain.send(b"second marker")
        with_key = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared,
                                    crypto_key_reader=_reader(api.module, pairs["a"]))
        expected = [*sealed, b"single"] if action == "FAIL" else []
        got = [with_key.receive(10_000).data() for _ in range(len(expected) + 1)]
        assert sorted(got) == sorted([*expected, b"second marker"])
    finally:
        ours.close()


class _Versioned(CryptoKeyReader):
    """A reader that rotates: public keys by the version in force, private keys by the version
    each data key says it was wrapped under (the metadata that travels with it)."""

    def __init__(self, versions: dict[str, KeyPair], current: str) -> None:
        super().__init__(None, None)
        self.versions = versions
        self.current = current

    def get_public_key(self, key_name, metadata):
        return EncryptionKeyInfo(self.versions[self.current].public_pem(), {"version": self.current})

    def get_private_key(self, key_name, metadata):
        return EncryptionKeyInfo(self.versions[metadata["version"]].private_pem())


def test_rotated_keys_ours_to_official(shared_broker, topic, pairs, monkeypatch):
    """A new data key for every entry (the four hours made none), and mid-way a new key pair:
    the official consumer holding the old pair opens what was sealed before the rotation and
    CONSUMEs the rest sealed; ours, following the version in each key's metadata, opens all."""
    monkeypatch.setattr(message_crypto, "DATA_KEY_LIFETIME", 0.0)
    rotating = _Versioned({"1": pairs["a"], "2": pairs["b"]}, "1")
    ours = magnetar.client.Client(shared_broker.service_url)
    official = _client(pulsar, shared_broker.service_url)
    try:
        old_holder = official.subscribe(topic, "official", crypto_key_reader=_reader(pulsar, pairs["a"]),
                                        crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME)
        follower = ours.subscribe(topic, "ours", crypto_key_reader=_Versioned(rotating.versions, "1"))
        producer = ours.create_producer(topic, encryption_key="rotating", crypto_key_reader=rotating)
        for i in range(4):
            producer.send(b"v1 %d" % i)
        rotating.current = "2"
        for i in range(4):
            producer.send(b"v2 %d" % i)
        got = [follower.receive(10_000) for _ in range(8)]
        assert [m.data() for m in got] == [b"v1 %d" % i for i in range(4)] + [b"v2 %d" % i for i in range(4)]
        wrapped = [m.encryption_context().keys()[0] for m in got]
        assert len({k.value for k in wrapped}) == 8 and [k.metadata for k in wrapped] == [{"version": "1"}] * 4 + [
            {"version": "2"}] * 4
        seen = [old_holder.receive(10_000) for _ in range(8)]
        assert [m.data() for m in seen[:4]] == [b"v1 %d" % i for i in range(4)]
        assert all(m.encryption_context().is_decryption_failed() for m in seen[4:])
    finally:
        ours.close()
        official.close()


def test_rotated_keys_official_to_ours(shared_broker, topic, pairs):
    """Official producers, each with its own data key, under a key name per key pair (how the
    official client rotates): one consumer of ours holding both names opens them interleaved."""
    official = _client(pulsar, shared_broker.service_url)
    ours = magnetar.client.Client(shared_broker.service_url)
    try:
        consumer = ours.subscribe(topic, "ours", crypto_key_reader=NamedKeys({"v1": pairs["a"], "v2": pairs["b"]}))
        old = official.create_producer(topic, encryption_key="v1", crypto_key_reader=_reader(pulsar, pairs["a"]))
        new = official.create_producer(topic, encryption_key="v2", crypto_key_reader=_reader(pulsar, pairs["b"]))
        for i in range(6):
            (old if i % 2 else new).send(b"message %d" % i)
        assert [consumer.receive(10_000).data() for _ in range(6)] == [b"message %d" % i for i in range(6)]
    finally:
        official.close()
        ours.close()


def test_partitioned_topic_reader_and_consumer(shared_broker, api, pairs):
    """Every partition's producer seals with its own data key; a multi-topic consumer and a
    reader open them all."""
    topic = f"persistent://public/default/parts-{uuid.uuid4().hex[:8]}"
    AdminClient(shared_broker.admin_url).create_partitioned_topic(topic, 3)
    client = api.client()
    consumer = client.subscribe(topic, "sub", crypto_key_reader=_reader(api.module, pairs["a"]),
                                initial_position=api.module.InitialPosition.Earliest)
    producer = client.create_producer(topic, encryption_key="k", crypto_key_reader=_reader(api.module, pairs["a"]),
                                      message_routing_mode=api.module.PartitionsRoutingMode.RoundRobinDistribution,
                                      batching_enabled=False)
    values = [b"part %d" % i for i in range(9)]
    for value in values:
        producer.send(value)
    assert sorted(consumer.receive(10_000).data() for _ in values) == values
    reader = client.create_reader(f"{topic}-partition-1", api.module.MessageId.earliest,
                                  crypto_key_reader=_reader(api.module, pairs["a"]))
    assert reader.read_next(10_000).data() in values


def test_receive_arrow_reads_decrypted_rows(shared_broker, topic, pairs):
    """receive_arrow's raw-entry path leaves encrypted entries to the message path, which
    decrypts them: the rows hold the plaintext."""
    client = magnetar.client.Client(shared_broker.service_url)
    try:
        consumer = client.subscribe(topic, "arrow", crypto_key_reader=_reader(magnetar.client, pairs["a"]))
        client.create_producer(topic).send(b"plain first")  # taken as rows, the consumer reads entries raw
        assert consumer.receive_arrow(1, timeout_millis=10_000).column("value").to_pylist() == [b"plain first"]
        producer = client.create_producer(topic, encryption_key="k", crypto_key_reader=_reader(magnetar.client,
                                                                                              pairs["a"]),
                                          batching_enabled=True, compression_type=magnetar.client.CompressionType.ZSTD)
        values = [b"row %d" % i for i in range(20)]
        for value in values:
            producer.send_async(value, None, properties={"i": value.decode()})
        producer.flush()
        rows: list[bytes] = []
        while len(rows) < len(values):
            batch = consumer.receive_arrow(100, timeout_millis=10_000)
            rows.extend(batch.column("value").to_pylist())
        assert rows == values
    finally:
        client.close()
