"""Key pairs for encryption tests, made fresh by `cryptography` and written as PEM files, in the
forms users have them: `openssl genrsa` (PKCS#8), `openssl ecparam -genkey` (SEC 1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.client import CryptoError, CryptoKeyReader, EncryptionKeyInfo


@dataclass(frozen=True)
class KeyPair:
    public: Path
    private: Path

    def public_pem(self) -> bytes:
        return self.public.read_bytes()

    def private_pem(self) -> bytes:
        return self.private.read_bytes()

    def spki_der(self) -> bytes:
        key = serialization.load_pem_public_key(self.public_pem())
        return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)

    def pkcs8_der(self) -> bytes:
        key = serialization.load_pem_private_key(self.private_pem(), None)
        return key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())


def rsa_pair(directory: Path, name: str, bits: int = 2048) -> KeyPair:
    return _write(directory, name, rsa.generate_private_key(65537, bits), serialization.PrivateFormat.PKCS8)


def ec_pair(directory: Path, name: str, curve: ec.EllipticCurve | None = None) -> KeyPair:
    key = ec.generate_private_key(curve or ec.SECP256R1())
    return _write(directory, name, key, serialization.PrivateFormat.TraditionalOpenSSL)


def _write(directory: Path, name: str, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey,
           form: serialization.PrivateFormat) -> KeyPair:
    pair = KeyPair(directory / f"{name}.pub.pem", directory / f"{name}.pem")
    pair.private.write_bytes(key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption()))
    pair.public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    return pair


class NamedKeys(CryptoKeyReader):
    """magnetar.client's reader of several keys by name (a producer of several keys, a consumer
    holding a few), with metadata per public key: what Java users implement CryptoKeyReader for."""

    def __init__(self, pairs: Mapping[str, KeyPair], metadata: Mapping[str, Mapping[str, str]] | None = None) -> None:
        super().__init__(None, None)
        self.pairs = dict(pairs)
        self.metadata = dict(metadata or {})
        self.asked: list[tuple[str, dict[str, str]]] = []

    def _pair(self, key_name: str) -> KeyPair:
        if key_name not in self.pairs:
            raise CryptoError(f"no key named {key_name}")  # what a reader says of a key it does not hold
        return self.pairs[key_name]

    def get_public_key(self, key_name: str, metadata: Mapping[str, str]) -> EncryptionKeyInfo:
        return EncryptionKeyInfo(self._pair(key_name).public_pem(), dict(self.metadata.get(key_name, {})))

    def get_private_key(self, key_name: str, metadata: Mapping[str, str]) -> EncryptionKeyInfo:
        self.asked.append((key_name, dict(metadata)))
        return EncryptionKeyInfo(self._pair(key_name).private_pem())
