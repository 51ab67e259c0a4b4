"""client.crypto without a broker: the layout of an encrypted entry, data keys renewed and
cached, hostile metadata, and what a consumer does with an entry no key opens."""

from __future__ import annotations

import os
import time

import pytest
from crypto_keys import NamedKeys, ec_pair, rsa_pair
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from magnetar.client import ConsumerCryptoFailureAction, CryptoError, CryptoKeyReader
from magnetar.client.crypto import ecies, key_wrap, message_crypto
from magnetar.client.crypto.message_crypto import Decryptor, Encryptor
from magnetar.client.incoming import ChunkAssembler, decode_entry
from magnetar.client.outgoing import PendingMessage, build_batch_entry, chunk_entries, single_metadata
from magnetar.wire.batch import encode_single_message
from magnetar.wire.compression import compress
from magnetar.wire.entry import build_entry, parse_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

OAEP_SHA1 = padding.OAEP(padding.MGF1(hashes.SHA1()), hashes.SHA1(), None)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keys")
    return {"rsa": rsa_pair(directory, "rsa"), "rsa2": rsa_pair(directory, "rsa2"), "ec": ec_pair(directory, "ec"),
            "p521": ec_pair(directory, "p521", ec.SECP521R1())}


def _metadata() -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)


def test_an_entry_is_laid_out_as_the_official_clients_lay_it(keys):
    encryptor = Encryptor(["k1"], CryptoKeyReader(str(keys["rsa"].public), None))
    metadata = _metadata()
    payload = os.urandom(300)
    sealed = encryptor.encrypt(metadata, payload)
    assert [k.key for k in metadata.encryption_keys] == ["k1"] and not metadata.HasField("encryption_algo")
    assert len(metadata.encryption_param) == 12 and len(sealed) == len(payload) + 16
    # what the C++ client does to open it: RSA-OAEP(SHA-1) for the data key, AES-256-GCM, tag last
    private = serialization.load_pem_private_key(keys["rsa"].private_pem(), None)
    data_key = private.decrypt(metadata.encryption_keys[0].value, OAEP_SHA1)
    assert len(data_key) == 32
    assert AESGCM(data_key).decrypt(metadata.encryption_param, sealed, None) == payload


@pytest.mark.parametrize("kind", ["rsa", "ec", "p521"])
def test_round_trip_and_a_fresh_nonce_each_entry(keys, kind):
    pair = keys[kind]
    encryptor = Encryptor(["k"], CryptoKeyReader(str(pair.public), None))
    decryptor = Decryptor(CryptoKeyReader(None, str(pair.private)))
    nonces = set()
    for size in (0, 1, 15, 16, 17, 4096):
        metadata, payload = _metadata(), os.urandom(size)
        sealed = encryptor.encrypt(metadata, payload)
        nonces.add(metadata.encryption_param)
        assert decryptor.decrypt(metadata, memoryview(sealed)) == payload
        tampered = bytearray(sealed)
        tampered[0] ^= 1
        assert decryptor.decrypt(metadata, bytes(tampered)) is None
    assert len(nonces) == 6


def test_several_keys_each_consumer_holding_one(keys):
    both = NamedKeys({"a": keys["rsa"], "b": keys["ec"]}, metadata={"b": {"version": "7"}})
    encryptor = Encryptor(["a", "b"], both)
    metadata, payload = _metadata(), b"for two"
    sealed = encryptor.encrypt(metadata, payload)
    assert [(k.key, {kv.key: kv.value for kv in k.metadata}) for k in metadata.encryption_keys] == [
        ("a", {}), ("b", {"version": "7"})]
    holder_of_b = NamedKeys({"b": keys["ec"]})
    assert Decryptor(holder_of_b).decrypt(metadata, sealed) == payload
    assert ("b", {"version": "7"}) in holder_of_b.asked  # the key's metadata comes back to the reader
    assert Decryptor(NamedKeys({"a": keys["rsa"]})).decrypt(metadata, sealed) == payload
    assert Decryptor(NamedKeys({"a": keys["rsa2"]})).decrypt(metadata, sealed) is None


def test_the_data_key_is_renewed_and_consumers_keep_each(keys, monkeypatch):
    monkeypatch.setattr(message_crypto, "DATA_KEY_LIFETIME", 0.0)  # every data key due at once
    encryptor = Encryptor(["k"], CryptoKeyReader(str(keys["rsa"].public), None))
    first, second = _metadata(), _metadata()
    sealed_first = encryptor.encrypt(first, b"one")
    sealed_second = encryptor.encrypt(second, b"two")
    monkeypatch.undo()
    reader = NamedKeys({"k": keys["rsa"]})
    decryptor = Decryptor(reader)
    assert first.encryption_keys[0].value != second.encryption_keys[0].value
    for _ in range(3):  # both data keys stay known: one unwrap each, however often they come
        assert decryptor.decrypt(second, sealed_second) == b"two"
        assert decryptor.decrypt(first, sealed_first) == b"one"
    assert len(reader.asked) == 2


def test_a_renewal_that_fails_keeps_the_data_key_every_name_opens(keys, tmp_path):
    public = tmp_path / "k.pub.pem"
    public.write_bytes(keys["rsa"].public_pem())
    encryptor = Encryptor(["k"], CryptoKeyReader(str(public), None))
    before = _metadata()
    encryptor.encrypt(before, b"x")
    public.write_bytes(b"not a key")
    encryptor.renew()
    after = _metadata()
    sealed = encryptor.encrypt(after, b"still")
    assert after.encryption_keys[0].value == before.encryption_keys[0].value
    assert Decryptor(CryptoKeyReader(None, str(keys["rsa"].private))).decrypt(after, sealed) == b"still"
    public.write_bytes(keys["rsa2"].public_pem())  # a replaced key file: the next data key is wrapped under it
    encryptor.renew()
    rotated = _metadata()
    sealed = encryptor.encrypt(rotated, b"new key")
    assert Decryptor(CryptoKeyReader(None, str(keys["rsa2"].private))).decrypt(rotated, sealed) == b"new key"
    assert Decryptor(CryptoKeyReader(None, str(keys["rsa"].private))).decrypt(rotated, sealed) is None


def test_a_producer_without_a_usable_key_is_refused(keys, tmp_path):
    ed = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "ed.pem").write_bytes(ed)
    (tmp_path / "junk.pem").write_bytes(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    for path, words in ((tmp_path / "ed.pem", "only RSA and EC"), (tmp_path / "junk.pem", "not a PEM public key"),
                        (tmp_path / "missing.pem", "cannot read the public key")):
        with pytest.raises(CryptoError, match=words):
            Encryptor(["k"], CryptoKeyReader(str(path), None))
    with pytest.raises(CryptoError, match="no public key file"):
        Encryptor(["k"], CryptoKeyReader(None, str(keys["rsa"].private)))


def test_a_password_protected_or_foreign_private_key_opens_nothing(keys, tmp_path):
    key = serialization.load_pem_private_key(keys["rsa"].private_pem(), None)
    locked = tmp_path / "locked.pem"
    locked.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                         serialization.BestAvailableEncryption(b"secret")))
    with pytest.raises(CryptoError, match="not an unencrypted PEM private key"):
        key_wrap.private_key(locked.read_bytes())
    metadata = _metadata()
    sealed = Encryptor(["k"], CryptoKeyReader(str(keys["rsa"].public), None)).encrypt(metadata, b"x")
    assert Decryptor(CryptoKeyReader(None, str(locked))).decrypt(metadata, sealed) is None


class _Raising(CryptoKeyReader):
    def get_private_key(self, key_name, metadata):
        raise RuntimeError("the application's reader broke")


def test_hostile_metadata_costs_a_bounded_effort(keys):
    """An entry naming thousands of keys, wrong nonces, junk wrapped keys: None, quickly, and a
    key that failed is not tried again for every message."""
    reader = NamedKeys({"k": keys["rsa"]})
    decryptor = Decryptor(reader)
    metadata = _metadata()
    metadata.encryption_param = os.urandom(12)
    for i in range(5000):
        metadata.encryption_keys.add(key="k", value=os.urandom(256) + i.to_bytes(4, "big"))
    started = time.monotonic()
    assert decryptor.decrypt(metadata, os.urandom(64)) is None
    assert len(reader.asked) == message_crypto.MAX_UNWRAPS_PER_ENTRY
    assert time.monotonic() - started < 5
    single = _metadata()
    single.encryption_param = os.urandom(12)
    single.encryption_keys.add(key="k", value=b"\x00" * 3)
    for _ in range(100):
        assert decryptor.decrypt(single, b"x" * 40) is None
    assert len(reader.asked) == message_crypto.MAX_UNWRAPS_PER_ENTRY + 1
    for nonce in (b"", b"\x00" * 11, b"\x00" * 13):
        single.encryption_param = nonce
        assert decryptor.decrypt(single, b"x" * 40) is None
    single.encryption_param = os.urandom(12)
    single.encryption_keys[0].value = os.urandom(256)
    assert Decryptor(_Raising(None, None)).decrypt(single, b"y" * 40) is None


def test_ecies_refuses_what_it_did_not_wrap(keys):
    private = serialization.load_pem_private_key(keys["ec"].private_pem(), None)
    wrapped = ecies.wrap(private.public_key(), b"k" * 32)
    assert ecies.unwrap(private, wrapped) == b"k" * 32
    for bad in (wrapped[:-1] + bytes([wrapped[-1] ^ 1]), wrapped[:30], b"", b"\x04" + b"\x00" * 100):
        with pytest.raises(ecies.EciesError):
            ecies.unwrap(private, bad)


def test_ecies_reads_a_compressed_ephemeral_point(keys):
    """BouncyCastle decodes either point encoding; the KDF takes the encoding as it came."""
    private = serialization.load_pem_private_key(keys["ec"].private_pem(), None)
    ephemeral = ec.generate_private_key(private.curve)
    point = ephemeral.public_key().public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
    mac_key, stream = ecies._keys(point, ephemeral.exchange(ec.ECDH(), private.public_key()), 32)
    ciphertext = ecies._xor(b"d" * 32, stream)
    wrapped = point + ciphertext + ecies._tag(mac_key, ciphertext).finalize()
    assert ecies.unwrap(private, wrapped) == b"d" * 32


def _message(value: bytes, seq: int, **kw) -> PendingMessage:
    return PendingMessage(value, seq, None, **kw)


def _command(entry_id: int = 0) -> pb.CommandMessage:
    return pb.CommandMessage(consumer_id=1, message_id=pb.MessageIdData(ledgerId=5, entryId=entry_id))


def test_a_batch_is_compressed_then_encrypted_and_decoded_back(keys):
    encryptor = Encryptor(["k"], CryptoKeyReader(str(keys["rsa"].public), None))
    messages = [_message(f"value-{i}".encode() * 20, i, properties={"i": str(i)}, partition_key=f"key{i}")
                for i in range(5)]
    payload = b"".join(encode_single_message(m.value, m.sequence_id, m.properties, m.partition_key)
                       for m in messages)
    entry = build_batch_entry(messages, payload, producer_name="p", publish_time=1, compression=pb.ZSTD,
                              sealer=encryptor)
    parsed = parse_entry(entry)
    assert parsed.metadata.compression == pb.ZSTD and parsed.metadata.uncompressed_size == len(payload)
    assert _aes_gcm_open(keys, parsed) == compress(pb.ZSTD, payload)
    decrypt = Decryptor(CryptoKeyReader(None, str(keys["rsa"].private))).decrypt
    decoded = decode_entry(None, "t", _command(), entry, max_size=1 << 20, decrypt=decrypt)
    assert [m.data() for m in decoded.messages] == [m.value for m in messages]
    assert [m.properties() for m in decoded.messages] == [{"i": str(i)} for i in range(5)]
    context = decoded.messages[0].encryption_context()
    assert context is not None and not context.is_decryption_failed() and context.batch_size() == 5


def _aes_gcm_open(keys, parsed) -> bytes:
    private = serialization.load_pem_private_key(keys["rsa"].private_pem(), None)
    data_key = private.decrypt(parsed.metadata.encryption_keys[0].value, OAEP_SHA1)
    return AESGCM(data_key).decrypt(parsed.metadata.encryption_param, bytes(parsed.payload), None)


@pytest.mark.parametrize("action", list(ConsumerCryptoFailureAction))
def test_an_entry_no_key_opens(keys, action):
    encryptor = Encryptor(["k"], CryptoKeyReader(str(keys["rsa"].public), None))
    messages = [_message(b"a" * 50, 0), _message(b"b" * 50, 1)]
    payload = b"".join(encode_single_message(m.value, m.sequence_id) for m in messages)
    entry = build_batch_entry(messages, payload, producer_name="p", publish_time=1, compression=pb.LZ4,
                              sealer=encryptor)
    wrong = Decryptor(CryptoKeyReader(None, str(keys["rsa2"].private))).decrypt
    for decrypt in (None, wrong):
        decoded = decode_entry(None, "t", _command(3), entry, max_size=1 << 20, decrypt=decrypt,
                               crypto_failure_action=action)
        assert decoded.undecryptable
        if action != ConsumerCryptoFailureAction.CONSUME:
            assert decoded.messages == [] and decoded.skipped == 1
            assert decoded.validation_error == (pb.CommandAck.DecryptionError
                                                if action == ConsumerCryptoFailureAction.DISCARD else None)
            continue
        [message] = decoded.messages  # the batch whole, as stored, under the entry's id
        assert message.data() == bytes(parse_entry(entry).payload)
        assert str(message.message_id()) == "(5,3,-1,-1)"
        context = message.encryption_context()
        assert context.is_decryption_failed() and context.batch_size() == 2
        assert context.compression_type().name == "LZ4" and context.uncompressed_message_size() == len(payload)
        wrapped = context.keys()
        assert [k.key for k in wrapped] == ["k"] and len(context.param()) == 12


def test_chunks_are_encrypted_one_by_one_and_joined_after_decryption(keys):
    encryptor = Encryptor(["k", "k2"], NamedKeys({"k": keys["rsa"], "k2": keys["ec"]}))
    message = _message(os.urandom(50_000), 9)
    metadata, payload = single_metadata(message, producer_name="p", publish_time=1, compression=pb.NONE)
    limit = 8192
    entries = list(chunk_entries(metadata, payload, limit, encryptor))
    assert len(entries) > 6 and all(len(e) <= limit for e in entries)
    params = {parse_entry(e).metadata.encryption_param for e in entries}
    assert len(params) == len(entries)  # a nonce per chunk
    assert all(len(parse_entry(e).metadata.encryption_keys) == 2 for e in entries)  # not piled up chunk by chunk
    decrypt = Decryptor(NamedKeys({"k2": keys["ec"]})).decrypt
    chunks = ChunkAssembler()
    decoded = [decode_entry(None, "t", _command(i), e, max_size=1 << 20, decrypt=decrypt, chunks=chunks)
               for i, e in enumerate(entries)]
    assert [m.data() for d in decoded for m in d.messages] == [message.value]


def test_the_official_clients_entry_opens(keys):
    """An entry as pulsar-client 3.13 wrote it, rebuilt from its parts: the payload sealed by
    AES-256-GCM with the data key wrapped by RSA-OAEP-SHA1 (checked on live entries in
    test_encryption.py); here the same layout built by hand, opened by the Decryptor."""
    private = serialization.load_pem_private_key(keys["rsa"].private_pem(), None)
    data_key, nonce = os.urandom(32), os.urandom(12)
    metadata = _metadata()
    metadata.encryption_keys.add(key="client-rsa.pem", value=private.public_key().encrypt(data_key, OAEP_SHA1))
    metadata.encryption_param = nonce
    entry = build_entry(metadata, AESGCM(data_key).encrypt(nonce, b"hello", None))
    decoded = decode_entry(None, "t", _command(), entry, max_size=1 << 20,
                           decrypt=Decryptor(CryptoKeyReader(None, str(keys["rsa"].private))).decrypt)
    assert [m.data() for m in decoded.messages] == [b"hello"]
