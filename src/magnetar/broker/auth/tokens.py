"""JSON Web Tokens as Pulsar makes and checks them (PyJWT does the cryptography), and
the key material they are signed with, read the ways Pulsar's keys give it.

A key setting (tokenSecretKey, tokenPublicKey, `--secret-key`, `--private-key`) is
`data:;base64,<base64>`, `file:///path`, a plain path, or the base64 text itself. A
secret key is its raw bytes (what `tokens create-secret-key` writes); asymmetric keys
are DER, as Pulsar writes them, or PEM.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.broker.auth.algorithms import ASYMMETRIC_ALGORITHMS, HMAC_ALGORITHMS

_CURVES = {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1, "ES512": ec.SECP521R1}
_DURATION = re.compile(r"^(\d+)\s*([smhdwy]?)$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


class KeyMaterialError(ValueError):
    """Key material that cannot be read or used; the message says which and why."""


def read_key_material(setting: str) -> bytes:
    """The bytes a key setting designates."""
    text = setting.strip()
    if text.startswith("data:"):
        _, _, encoded = text.partition(",")
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise KeyMaterialError("the data: URL's content is not base64") from None
    if text.startswith("file:"):
        return _read_file(Path(unquote(urlsplit(text).path)))
    path = Path(text)
    if path.is_file():
        return _read_file(path)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyMaterialError("neither a data: URL, a file:// URL, an existing file nor base64 text") from None


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KeyMaterialError(f"cannot read {path}: {exc.strerror}") from None


def secret_key(material: bytes) -> bytes:
    """A secret key long enough for HS256 (RFC 7518: at least the hash size); a shorter one
    is most often a mistyped path read as base64."""
    if len(material) < HMAC_ALGORITHMS["HS256"]:
        raise KeyMaterialError(f"the secret key is {len(material)} bytes, under the {HMAC_ALGORITHMS['HS256']} "
                               "HS256 needs (a mistyped path is read as base64 text)")
    return material


def load_public_key(material: bytes) -> Any:
    try:
        if material.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(material)
        return serialization.load_der_public_key(material)
    except ValueError as exc:
        raise KeyMaterialError(f"not a public key in DER or PEM: {exc}") from None


def load_private_key(material: bytes) -> Any:
    try:
        if material.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(material, password=None)
        return serialization.load_der_private_key(material, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyMaterialError(f"not an unencrypted private key in DER or PEM: {exc}") from None


def new_secret_key(algorithm: str = "HS256") -> bytes:
    import secrets  # noqa: PLC0415

    if algorithm not in HMAC_ALGORITHMS:
        raise KeyMaterialError(f"{algorithm} is not a secret-key algorithm "
                               f"(use one of {', '.join(HMAC_ALGORITHMS)})")
    return secrets.token_bytes(HMAC_ALGORITHMS[algorithm])


def new_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """(private key, public key), DER-encoded (PKCS#8 and SubjectPublicKeyInfo) as Pulsar writes them."""
    if algorithm.startswith("RS"):
        private: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in _CURVES:
        private = ec.generate_private_key(_CURVES[algorithm]())
    else:
        raise KeyMaterialError(f"{algorithm} is not a key-pair algorithm "
                               f"(use one of {', '.join(ASYMMETRIC_ALGORITHMS)})")
    return (private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
            private.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo))


def parse_duration(text: str) -> int:
    """Seconds in `30s`, `10m`, `2h`, `7d`, `1w` or `1y` (Pulsar's relative times)."""
    match = _DURATION.match(text.strip().lower())
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 30s, 10m, 2h, 7d, 1w or 1y")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def create_token(subject: str, key: Any, algorithm: str, *, expires_in: int | None = None,
                 headers: dict[str, Any] | None = None, claim: str = "sub") -> str:
    """A signed token naming `subject` under `claim`, expiring `expires_in` seconds from now if given."""
    claims: dict[str, Any] = {claim: subject}
    if expires_in is not None:
        claims["exp"] = int(time.time()) + expires_in
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers)
