"""Encrypted messages in the source: `decryptionKeyFile` and `cryptoFailureAction`.

Producers that encrypt (docs/client.md, Encryption) leave payloads only a private key opens.
Given one (a PEM file, RSA or EC, read on the driver at `load()` to check it and again by
every task), the source decrypts each entry as a consumer would and reads it like any other.
An entry that no key opens (none given, or another producer's key) fails the query by
default, naming the entry and these options; `cryptoFailureAction=discard` leaves it out, and
`consume` makes it one row with the payload as stored (encrypted, compressed, a batch whole),
as the official clients' CONSUME hands it over. Keys and properties are in clear either way,
so filters on them are pushed down as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from magnetar.client.crypto.key_reader import CryptoKeyReader, EncryptionKeyInfo
from magnetar.formats.table import Undecryptable
from magnetar.spark.option_errors import MagnetarOptionError

ACTIONS = ("fail", "discard", "consume")
KNOWN = {
    "decryptionKeyFile": "a PEM private key (RSA or EC) that decrypts the topics' encrypted messages",
    "cryptoFailureAction": "fail (default), discard or consume: what becomes of an encrypted message no key opens",
}


@dataclass(frozen=True, slots=True)
class Decryption:
    key_file: str | None = None
    action: str = "fail"

    def undecryptable(self) -> Undecryptable:
        """What the row builder of a task does with encrypted entries (the key read now)."""
        if self.key_file is None:
            return Undecryptable(None, self.action)
        from magnetar.client.crypto.message_crypto import Decryptor  # noqa: PLC0415 (cryptography, when asked)

        return Undecryptable(Decryptor(_KeyOfFile(_read_key(self.key_file))).decrypt, self.action)


def decryption_options(options: Mapping[str, str]) -> Decryption:
    """The two options (lower-cased keys), the key file read and parsed here, on the driver."""
    action = str(options.get("cryptofailureaction", "fail")).strip().lower()
    if action not in ACTIONS:
        raise MagnetarOptionError(f"option 'cryptoFailureAction' must be fail, discard or consume, "
                                  f"got {options['cryptofailureaction']!r}")
    key_file = options.get("decryptionkeyfile") or None
    if key_file is not None:
        from magnetar.client import errors  # noqa: PLC0415 (with cryptography, only when asked)
        from magnetar.client.crypto.key_wrap import private_key  # noqa: PLC0415

        try:
            private_key(_read_key(key_file))
        except errors.CryptoError as exc:
            raise MagnetarOptionError(f"option 'decryptionKeyFile': {key_file}: {exc}") from None
    return Decryption(key_file, action)


def _read_key(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise MagnetarOptionError(f"option 'decryptionKeyFile': cannot read {path}: {exc.strerror}") from None


class _KeyOfFile(CryptoKeyReader):
    """The private key of decryptionKeyFile, read once per task, for any key name."""

    def __init__(self, pem: bytes) -> None:
        super().__init__(None, None)
        self._pem = pem

    def get_private_key(self, key_name: str, metadata: Mapping[str, str]) -> EncryptionKeyInfo:
        return EncryptionKeyInfo(self._pem)
