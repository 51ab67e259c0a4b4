"""Encrypting a producer's entries and decrypting a consumer's, as Pulsar's clients lay them out.

`Encryptor` (one per producer, as each official producer has its own): an AES-256 data key,
wrapped under every key name's public key when made and again every `DATA_KEY_LIFETIME`
seconds (the official clients' four hours; the reader is asked again then, so a replaced
public key takes effect). Each entry gets a random 12-byte nonce in `encryption_param`, its
payload becomes AES-GCM's ciphertext with the 16-byte tag after it, and `encryption_keys`
lists the wrapped data key per name with the key's metadata.

`Decryptor` (one per consumer): data keys unwrapped once and kept by their wrapped bytes
(the official clients key a cache by their MD5) for four hours; a wrapped key that none of
the reader's keys opens is remembered as such for a minute, so a consumer without the right
key does not run an RSA decryption for every message of a producer.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from magnetar.client import errors
from magnetar.client.crypto import key_wrap
from magnetar.client.crypto.key_reader import CryptoKeyReader
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)

DATA_KEY_LIFETIME = 4 * 60 * 60.0
"""Seconds a producer's data key is used, and a consumer keeps one it unwrapped."""
NONCE_SIZE = 12
TAG_SIZE = 16
_NONCES_PER_READ = 512
UNOPENED_LIFETIME = 60.0
"""Seconds a consumer remembers that it has no key for a wrapped data key."""
MAX_DATA_KEYS = 1000
MAX_UNWRAPS_PER_ENTRY = 8
"""Wrapped data keys one entry may make a consumer try to unwrap (an RSA decryption each):
producers name a few keys; an entry naming thousands must not hold the event loop for seconds."""


class Encryptor:
    """Encrypts a producer's entries under the data key of the moment."""

    def __init__(self, key_names: Sequence[str], reader: CryptoKeyReader) -> None:
        self._names = tuple(key_names)
        self._reader = reader
        self._nonces = b""
        self._use(*self._new_data_key())
        self._renew_at = time.monotonic() + DATA_KEY_LIFETIME

    def _use(self, aead: AESGCM, keys: list[pb.EncryptionKeys]) -> None:
        self._aead = aead
        self._keys_wire = pb.MessageMetadata(encryption_keys=keys).SerializePartialToString()
        """The `encryption_keys` fields as encoded, merged into each entry's metadata (a third
        of the cost of copying the messages in)."""
        self._overhead = sum(key.ByteSize() + 4 for key in keys) + 2 + NONCE_SIZE + TAG_SIZE
        """A key's field tag and length take 4 bytes at most; the nonce's 2."""

    def _new_data_key(self) -> tuple[AESGCM, list[pb.EncryptionKeys]]:
        """CryptoError naming the key when a public key cannot be had or used."""
        data_key = AESGCM.generate_key(256)
        keys = []
        for name in self._names:
            try:
                info = self._reader.get_public_key(name, {})
                wrapped = key_wrap.wrap(info.key, data_key)
            except Exception as exc:  # the reader may be the application's, raising anything
                raise errors.CryptoError(f"encryption key {name!r}: {exc}") from None
            metadata = [pb.KeyValue(key=k, value=v) for k, v in info.metadata.items()]
            keys.append(pb.EncryptionKeys(key=name, value=wrapped, metadata=metadata))
        return AESGCM(data_key), keys

    def renew(self) -> None:
        """A new data key now; the old one stays in use if a public key fails (logged), so no
        message goes out under a data key some key name cannot open."""
        self._renew_at = time.monotonic() + DATA_KEY_LIFETIME
        try:
            self._use(*self._new_data_key())
        except errors.CryptoError as exc:
            log.warning("keeping the current data key, a new one could not be wrapped: %s", exc)

    def encrypt(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        """The ciphertext of `payload`; sets `metadata`'s encryption fields (replacing any)."""
        if time.monotonic() >= self._renew_at:
            self.renew()
        nonces = self._nonces
        if not nonces:
            nonces = os.urandom(NONCE_SIZE * _NONCES_PER_READ)
        nonce, self._nonces = nonces[:NONCE_SIZE], nonces[NONCE_SIZE:]
        keys = metadata.encryption_keys
        if keys:
            del keys[:]
        metadata.MergeFromString(self._keys_wire)
        metadata.encryption_param = nonce
        return self._aead.encrypt(nonce, payload, None)

    def overhead(self) -> int:
        """Bytes encryption adds to an entry's metadata and payload, at most."""
        return self._overhead


class Decryptor:
    """Decrypts entries with the data keys the reader's private keys unwrap."""

    def __init__(self, reader: CryptoKeyReader) -> None:
        self._reader = reader
        self._data_keys: OrderedDict[bytes, tuple[AESGCM | None, float]] = OrderedDict()

    def decrypt(self, metadata: pb.MessageMetadata, payload: bytes | memoryview) -> bytes | None:
        """The plaintext, or None when no data key this consumer can unwrap opens it."""
        nonce = metadata.encryption_param
        if len(nonce) != NONCE_SIZE:
            return None
        if type(payload) is memoryview and payload.format != "B":
            payload = payload.cast("B")  # a view of signed bytes (Arrow's buffers), which cryptography refuses
        unwraps = MAX_UNWRAPS_PER_ENTRY
        for key in metadata.encryption_keys:
            aead = self._known(key.value)
            if aead is False:
                if not unwraps:
                    continue
                unwraps -= 1
                aead = self._unwrapped(key)
            if aead is None:
                continue
            try:
                return aead.decrypt(nonce, payload, None)
            except InvalidTag:
                continue
        return None

    def _known(self, wrapped: bytes) -> AESGCM | bool | None:
        """The data key of a wrapped key seen lately (None: none of ours opened it, and it is
        not yet time to try again), False if not seen. A hit costs one dict look-up."""
        known = self._data_keys.get(wrapped)
        if known is None:
            return False
        aead, until = known
        if aead is not None:
            return aead
        return None if time.monotonic() < until else False

    def _unwrapped(self, key: pb.EncryptionKeys) -> AESGCM | None:
        """Unwrap and remember; keys unwrapped more than DATA_KEY_LIFETIME ago are forgotten
        then (as the C++ client's cache, which ages its keys when it adds one)."""
        aead = self._unwrap(key)
        now = time.monotonic()
        keys = self._data_keys
        while keys and (len(keys) >= MAX_DATA_KEYS or next(iter(keys.values()))[1] <= now):
            keys.popitem(last=False)
        keys[key.value] = (aead, now + (DATA_KEY_LIFETIME if aead is not None else UNOPENED_LIFETIME))
        return aead

    def _unwrap(self, key: pb.EncryptionKeys) -> AESGCM | None:
        metadata = {kv.key: kv.value for kv in key.metadata}
        try:
            return AESGCM(key_wrap.unwrap(self._reader.get_private_key(key.key, metadata).key, key.value))
        except (errors.CryptoError, ValueError) as exc:  # ValueError: not an AES key's length
            log.debug("data key wrapped under %r not opened: %s", key.key, exc)
        except Exception:  # the application's reader failed: the message is undecryptable, the consumer goes on
            log.exception("the CryptoKeyReader failed on key %r", key.key)
        return None
