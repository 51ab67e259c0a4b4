"""A data key wrapped under a PEM public key and unwrapped with its private key.

RSA keys use OAEP with SHA-1 for both the hash and MGF1 (OpenSSL's RSA_PKCS1_OAEP_PADDING in
the C++ client, `RSA/NONE/OAEPWithSHA1AndMGF1Padding` in the Java client); EC keys use the
Java client's ECIES (`ecies`). PEM files come in any form `cryptography` reads (PKCS#8,
PKCS#1 "RSA PRIVATE KEY", SEC 1 "EC PRIVATE KEY", SubjectPublicKeyInfo); a key's bytes are
parsed once and the key kept, since a reader hands the same file back at every refresh.
"""

from __future__ import annotations

import functools

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from magnetar.client import errors
from magnetar.client.crypto import ecies

_OAEP = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@functools.lru_cache(maxsize=64)
def public_key(pem: bytes) -> PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError as exc:
        raise errors.CryptoError(f"not a PEM public key: {exc}") from None
    if not isinstance(key, PublicKey):
        raise errors.CryptoError(f"a {type(key).__name__}: only RSA and EC keys encrypt messages")
    return key


@functools.lru_cache(maxsize=64)
def private_key(pem: bytes) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:  # TypeError: a key protected by a password
        raise errors.CryptoError(f"not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, PrivateKey):
        raise errors.CryptoError(f"a {type(key).__name__}: only RSA and EC keys decrypt messages")
    return key


def wrap(pem: bytes, data_key: bytes) -> bytes:
    key = public_key(pem)
    if isinstance(key, rsa.RSAPublicKey):
        return key.encrypt(data_key, _OAEP)
    return ecies.wrap(key, data_key)


def unwrap(pem: bytes, wrapped: bytes) -> bytes:
    """The data key; CryptoError when this key did not wrap it."""
    key = private_key(pem)
    try:
        if isinstance(key, rsa.RSAPrivateKey):
            return key.decrypt(wrapped, _OAEP)
        return ecies.unwrap(key, wrapped)
    except ValueError as exc:  # EciesError is one
        raise errors.CryptoError(f"the data key was not wrapped under this key: {exc}") from None
