"""ECIES as Pulsar's Java client wraps a data key under an EC public key.

The Java client asks BouncyCastle for its `ECIES` cipher with no parameters, and so fixes
the construction: an ephemeral key pair on the recipient's curve, ECDH, KDF2 over SHA-1 (the
X9.63 KDF: counter from 1, no shared info) of the ephemeral point (uncompressed) followed by
the shared x-coordinate, a 16-byte HMAC-SHA1 key taken first from the KDF's output and the
XOR stream after it, and an HMAC-SHA1 tag over the ciphertext and an 8-byte zero length
block (no encoding vector). The output is point || ciphertext || tag. The C++ client, and so
the official Python client, knows no EC keys at all.
"""

from __future__ import annotations

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.x963kdf import X963KDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

MAC_KEY_SIZE = 16
TAG_SIZE = 20
_NO_ENCODING_LENGTH = bytes(8)


class EciesError(ValueError):
    """The wrapped key is malformed or its tag does not match (not ours, or altered)."""


def _keys(point: bytes, shared: bytes, length: int) -> tuple[bytes, bytes]:
    """(MAC key, XOR stream) from the KDF, the MAC key first as BouncyCastle takes it."""
    stream = X963KDF(hashes.SHA1(), MAC_KEY_SIZE + length, None).derive(point + shared)
    return stream[:MAC_KEY_SIZE], stream[MAC_KEY_SIZE:]


def _tag(mac_key: bytes, ciphertext: bytes) -> hmac.HMAC:
    mac = hmac.HMAC(mac_key, hashes.SHA1())
    mac.update(ciphertext)
    mac.update(_NO_ENCODING_LENGTH)
    return mac


def _xor(data: bytes, stream: bytes) -> bytes:
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(data), "big")


def wrap(public_key: ec.EllipticCurvePublicKey, data: bytes) -> bytes:
    ephemeral = ec.generate_private_key(public_key.curve)
    point = ephemeral.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    mac_key, stream = _keys(point, ephemeral.exchange(ec.ECDH(), public_key), len(data))
    ciphertext = _xor(data, stream)
    return point + ciphertext + _tag(mac_key, ciphertext).finalize()


def unwrap(private_key: ec.EllipticCurvePrivateKey, wrapped: bytes) -> bytes:
    field_bytes = (private_key.curve.key_size + 7) // 8
    if not wrapped:
        raise EciesError("empty")
    point_size = 1 + field_bytes if wrapped[0] in (2, 3) else 1 + 2 * field_bytes
    if len(wrapped) < point_size + TAG_SIZE:
        raise EciesError(f"{len(wrapped)} bytes is too short for a {private_key.curve.name} key")
    point, ciphertext, tag = wrapped[:point_size], wrapped[point_size:-TAG_SIZE], wrapped[-TAG_SIZE:]
    try:
        peer = ec.EllipticCurvePublicKey.from_encoded_point(private_key.curve, point)
    except ValueError as exc:
        raise EciesError(f"not a point of {private_key.curve.name}: {exc}") from None
    mac_key, stream = _keys(point, private_key.exchange(ec.ECDH(), peer), len(ciphertext))
    try:
        _tag(mac_key, ciphertext).verify(tag)
    except InvalidSignature:
        raise EciesError("the tag does not match") from None
    return _xor(ciphertext, stream)
