"""`Message.encryption_context()`: what a consumer learns of an encrypted message's encryption.

The official client (3.x) gives one for every message whose entry was encrypted, decrypted
or not, read from the entry's MessageMetadata; with `crypto_failure_action=CONSUME` and no
key that opens it, the message's data is the payload as stored (a batch as one message) and
this context holds what decrypting it later takes: the wrapped data keys, the nonce, and the
compression and batch size to undo after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.client.enums import CompressionType

if TYPE_CHECKING:
    from magnetar.wire.proto import pulsar_api_pb2 as pb


@dataclass(frozen=True, slots=True)
class EncryptionKey:
    """One wrapped data key: the key's name, the data key wrapped under it, its metadata."""

    key: str
    value: bytes
    metadata: dict[str, str]


class EncryptionContext:
    def __init__(self, metadata: pb.MessageMetadata, decryption_failed: bool) -> None:
        self._metadata = metadata
        self._failed = decryption_failed

    def keys(self) -> list[EncryptionKey]:
        return [EncryptionKey(k.key, k.value, {kv.key: kv.value for kv in k.metadata})
                for k in self._metadata.encryption_keys]

    def param(self) -> bytes:
        """The AES-GCM nonce (12 bytes)."""
        return self._metadata.encryption_param

    def algorithm(self) -> str:
        """`encryption_algo`: empty, as both official clients leave it."""
        return self._metadata.encryption_algo

    def compression_type(self) -> CompressionType:
        return CompressionType(self._metadata.compression)

    def uncompressed_message_size(self) -> int:
        return self._metadata.uncompressed_size

    def batch_size(self) -> int:
        """Messages in the batch, -1 when the entry is not a batch."""
        metadata = self._metadata
        return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else -1

    def is_decryption_failed(self) -> bool:
        return self._failed

    def __repr__(self) -> str:
        return (f"EncryptionContext(algorithm={self.algorithm()}, compression_type={self.compression_type().name}, "
                f"uncompressed_message_size={self.uncompressed_message_size()}, "
                f"is_decryption_failed={self._failed}, keys={[k.key for k in self.keys()]})")
