"""`CryptoKeyReader`: where a producer finds public keys and a consumer private keys, by name.

The official Python client's `CryptoKeyReader(public_key_path, private_key_path)` reads one
PEM file of each kind whatever key name is asked (the C++ client's DefaultCryptoKeyReader),
rereading it each time, so a replaced file is what the next data key is wrapped under. To
hold several keys, or to tell a consumer which private key opens which message, subclass it
and override `get_public_key` / `get_private_key`, as Java's CryptoKeyReader interface is
implemented: the metadata a producer's key carries travels in clear with every message and
comes back to the consumer's `get_private_key` (a key version, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.client import errors


@dataclass(frozen=True, slots=True)
class EncryptionKeyInfo:
    """A PEM key (public or private) and the metadata it travels with."""

    key: bytes
    metadata: Mapping[str, str] = field(default_factory=dict)


class CryptoKeyReader:
    """`CryptoKeyReader(public_key_path, private_key_path)`: PEM files (RSA or EC keys).

    Either path may be None where it is not needed: producers read only the public key,
    consumers only the private one.
    """

    def __init__(self, public_key_path: str | None, private_key_path: str | None) -> None:
        self.public_key_path = public_key_path
        self.private_key_path = private_key_path

    def get_public_key(self, key_name: str, metadata: Mapping[str, str]) -> EncryptionKeyInfo:
        """The public key to wrap data keys under for `key_name` (metadata: none is passed)."""
        return EncryptionKeyInfo(_read(self.public_key_path, "public"))

    def get_private_key(self, key_name: str, metadata: Mapping[str, str]) -> EncryptionKeyInfo:
        """The private key for a data key wrapped under `key_name` with that key's `metadata`."""
        return EncryptionKeyInfo(_read(self.private_key_path, "private"))


def _read(path: str | None, kind: str) -> bytes:
    if path is None:
        raise errors.CryptoError(f"this CryptoKeyReader was given no {kind} key file")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise errors.CryptoError(f"cannot read the {kind} key {path}: {exc.strerror}") from None
