"""EC keys against Pulsar's Java client's ciphers: the official Python client (its C++ core)
knows only RSA keys, so EC interop is checked against what the Java client's MessageCryptoBc
does, run by BouncyCastle itself (Debian's libbcprov-java, `.ci/run` installs it) through
tests/client/java/BcCryptoPeer.java: the same ECIES and AES-GCM ciphers, in both directions,
on entries that went through a broker."""

from __future__ import annotations

import base64
import os
import subprocess
import time
from pathlib import Path

import pulsar
import pytest
from crypto_keys import KeyPair, ec_pair
from cryptography.hazmat.primitives.asymmetric import ec
from rawclient import RawClient

import magnetar.client
from magnetar.client import CryptoKeyReader
from magnetar.client.connection import ClientConnection
from magnetar.client.raw_reader import RawReader
from magnetar.wire.batch import decode_batch, encode_single_message
from magnetar.wire.compression import compress, decompress
from magnetar.wire.entry import build_entry, parse_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
BCPROV = Path("/usr/share/java/bcprov.jar")
PEER = Path(__file__).parent / "java" / "BcCryptoPeer.java"
CURVES = [ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1(), ec.SECP256K1()]


class JavaPeer:
    """One JVM running BcCryptoPeer for a whole test."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["java", "-cp", str(BCPROV), str(PEER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, *words: str) -> list[str]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(" ".join(words) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        assert answer and answer[0] != "ERROR", answer
        return answer

    def encrypt(self, pair: KeyPair, payload: bytes) -> tuple[bytes, bytes, bytes]:
        wrapped, iv, sealed = self.ask("encrypt", "EC", base64.b64encode(pair.spki_der()).decode(), payload.hex())
        return bytes.fromhex(wrapped), bytes.fromhex(iv), bytes.fromhex(sealed)

    def decrypt(self, pair: KeyPair, wrapped: bytes, iv: bytes, sealed: bytes) -> bytes:
        [plain] = self.ask("decrypt", "EC", base64.b64encode(pair.pkcs8_der()).decode(), wrapped.hex(), iv.hex(),
                           sealed.hex() or "")
        return bytes.fromhex(plain)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def java():
    if not BCPROV.exists() and not os.environ.get("CI"):
        pytest.skip("BouncyCastle (Debian's libbcprov-java) is not installed; .ci/run installs it")
    peer = JavaPeer()
    yield peer
    peer.close()


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_ours_to_java(shared_broker, topic, tmp_path, java, curve):
    """Our producer's batches, compressed then encrypted under an EC key: the Java client's
    ciphers open them, and the messages come out of the batch as they went in."""
    pair = ec_pair(tmp_path, "ec", curve)
    client = magnetar.client.Client(shared_broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, encryption_key="ec-key", crypto_key_reader=CryptoKeyReader(
            str(pair.public), None), batching_enabled=True, compression_type=magnetar.client.CompressionType.ZLib)
        values = [os.urandom(n) for n in (0, 1, 100, 3000)]
        for value in values:
            producer.send_async(value, None)
        producer.flush()
    finally:
        client.close()
    with ClientConnection(shared_broker.service_url) as conn:
        reader = RawReader(conn, topic)
        _, entry = reader.read_entry()
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    [key] = metadata.encryption_keys
    assert key.key == "ec-key" and key.value[0] == 4  # BouncyCastle's ECIES: uncompressed ephemeral point first
    compressed = java.decrypt(pair, key.value, metadata.encryption_param, bytes(parsed.payload))
    batch = decompress(metadata.compression, compressed, metadata.uncompressed_size, max_size=1 << 20)
    assert [bytes(m.value) for m in decode_batch(batch, metadata.num_messages_in_batch)] == values


@pytest.mark.parametrize("curve", CURVES, ids=lambda c: c.name)
def test_java_to_ours(shared_broker, topic, tmp_path, java, curve):
    """A batch the Java client's ciphers sealed, published as it would publish it: our consumer
    opens it; the official Python client, which has no EC support, can only CONSUME it sealed."""
    pair = ec_pair(tmp_path, "ec", curve)
    values = [b"from-java-%d" % i * (i + 1) for i in range(5)]
    batch = b"".join(encode_single_message(v, i, {"i": str(i)}, f"key-{i}") for i, v in enumerate(values))
    wrapped, iv, sealed = java.encrypt(pair, compress(pb.LZ4, batch))
    metadata = pb.MessageMetadata(producer_name="java", sequence_id=0, publish_time=int(time.time() * 1000),
                                  num_messages_in_batch=len(values), compression=pb.LZ4,
                                  uncompressed_size=len(batch), encryption_param=iv)
    metadata.encryption_keys.add(key="ec-key", value=wrapped)
    ours = magnetar.client.Client(shared_broker.service_url, operation_timeout_seconds=10)
    official = pulsar.Client(shared_broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    raw = RawClient(shared_broker.service_url)
    try:
        consumer = ours.subscribe(topic, "ours", crypto_key_reader=CryptoKeyReader(None, str(pair.private)))
        sealed_reader = official.subscribe(topic, "official",
                                           crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME)
        raw.connect()
        raw.create_producer(topic)
        raw.command(T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=0, num_messages=len(values))),
                    build_entry(metadata, sealed))
        raw.expect(T.SEND_RECEIPT)
        got = [consumer.receive(10_000) for _ in values]
        assert [m.data() for m in got] == values
        assert [m.properties() for m in got] == [{"i": str(i)} for i in range(5)]
        assert [m.partition_key() for m in got] == [f"key-{i}" for i in range(5)]
        whole = sealed_reader.receive(10_000)
        assert whole.data() == sealed and whole.encryption_context().is_decryption_failed()
    finally:
        raw.close()
        ours.close()
        official.close()
