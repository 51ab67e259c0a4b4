"""Messages on their way out, and the entries a producer builds from them (sans-IO).

A `PendingMessage` is what `send`/`send_async` produced: the value, its per-message
metadata and how to report the outcome (a callback or a future). The entry builders
lay out MessageMetadata as the C++ producer does (wire-protocol.md §2), so a broker, a
compactor or an official consumer cannot tell our entries from its own; the one addition
is PIP-191: a batch's MessageMetadata carries the batched filter properties.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from magnetar.client.enums import Result
from magnetar.client.message_id import MessageId
from magnetar.wire.batch import encode_varint
from magnetar.wire.compression import compress
from magnetar.wire.entry import build_entry, entry_of
from magnetar.wire.proto import pulsar_api_pb2 as pb


class Sealer(Protocol):
    """Encrypts an entry's payload (client.crypto's Encryptor), after compression."""

    def encrypt(self, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
        """The sealed payload; sets the encryption fields of `metadata`."""
        ...

    def overhead(self) -> int:
        """Bytes sealing adds to an entry (metadata and payload), at most."""
        ...


class Tally:
    """A completion that only counts its messages' answers (a transaction's, for messages
    sent in it without a callback): a batch of its messages alone is told once, with how
    many there were, and no message id is made for each. A failure still comes message by
    message, as `completion(result, MessageId())` (the id of none, as the official client gives)."""

    def __call__(self, result: Result, message_id: MessageId | None) -> None:
        raise NotImplementedError

    def answered(self, count: int) -> None:
        """`count` of its messages were stored."""
        raise NotImplementedError


class PendingMessage:
    """One message the application handed to a producer, with its sequence id."""

    __slots__ = ("completion", "deliver_at", "event_time", "key_b64", "null_key", "null_value", "ordering_key",
                 "partition_key", "properties", "replicate_to", "sequence_id", "txn", "value")

    def __init__(self, value: bytes, sequence_id: int, completion: Any, properties: dict[str, str] | None = None,
                 partition_key: str | None = None, ordering_key: bytes | None = None, event_time: int | None = None,
                 deliver_at: int | None = None, null_value: bool = False,
                 replicate_to: Sequence[str] | None = None, key_b64: bool = False, null_key: bool = False) -> None:
        self.value = value
        self.sequence_id = sequence_id
        self.completion = completion
        """A callable(result, message_id) or an asyncio.Future, completed on the receipt."""
        self.properties = properties
        self.partition_key = partition_key
        self.ordering_key = ordering_key
        self.event_time = event_time
        self.deliver_at = deliver_at
        self.null_value = null_value
        self.replicate_to = replicate_to
        self.key_b64 = key_b64
        """`partition_key` is the base64 of the key's bytes (Java's keyBytes; a SEPARATED KeyValueSchema)."""
        self.null_key = null_key
        """The key is null (a SEPARATED KeyValueSchema's None key): MessageMetadata.null_partition_key."""
        self.txn: tuple[int, int] | None = None
        """(most, least) bits of the transaction the message belongs to: a batch holds one
        transaction's messages, or none's, and its metadata names it (PIP-31)."""


def _entry_metadata(producer_name: str, first: PendingMessage, publish_time: int,
                    schema_version: bytes | None) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=first.sequence_id,
                                  publish_time=publish_time)
    if first.txn is not None:
        metadata.txnid_most_bits, metadata.txnid_least_bits = first.txn
    if first.partition_key is not None:
        metadata.partition_key = first.partition_key
        if first.key_b64:
            metadata.partition_key_b64_encoded = True
    if first.ordering_key is not None:
        metadata.ordering_key = first.ordering_key
    if first.replicate_to:
        metadata.replicate_to.extend(first.replicate_to)
    if schema_version:
        metadata.schema_version = schema_version
    return metadata


def compressed(metadata: pb.MessageMetadata, payload: bytes, compression: int) -> bytes:
    # An empty payload stays uncompressed: the C++ consumer cannot inflate into 0 bytes.
    if compression == pb.NONE or not payload:
        return payload
    metadata.compression = compression
    metadata.uncompressed_size = len(payload)
    return compress(compression, payload)


def build_batch_entry(messages: Sequence[PendingMessage], payload: bytes, *, producer_name: str,
                      publish_time: int, compression: int, batch_properties: Sequence[tuple[str, str]] = (),
                      schema_version: bytes | None = None, sealer: Sealer | None = None) -> bytes:
    """The entry of a batch whose (uncompressed) payload is `payload`.

    Like the C++ producer: sequence id, partition and ordering key come from the first
    message, `num_messages_in_batch` is set, the payload is compressed as a whole, then
    encrypted as a whole by the `sealer` if any. `batch_properties` are PIP-191's batched
    filter properties (the same for every message).
    """
    metadata = _entry_metadata(producer_name, messages[0], publish_time, schema_version)
    metadata.num_messages_in_batch = len(messages)
    for key, value in batch_properties:
        metadata.properties.add(key=key, value=value)
    payload = compressed(metadata, payload, compression)
    return build_entry(metadata, payload if sealer is None else sealer.encrypt(metadata, payload))


def single_metadata(message: PendingMessage, *, producer_name: str, publish_time: int, compression: int,
                    schema_version: bytes | None = None) -> tuple[pb.MessageMetadata, bytes]:
    """MessageMetadata and (maybe compressed) payload of a non-batched message."""
    metadata = _entry_metadata(producer_name, message, publish_time, schema_version)
    if message.properties:
        for key, value in message.properties.items():
            metadata.properties.add(key=key, value=value)
    if message.event_time:
        metadata.event_time = message.event_time
    if message.deliver_at is not None:
        metadata.deliver_at_time = message.deliver_at
    if message.null_value:
        metadata.null_value = True
    if message.null_key:
        metadata.null_partition_key = True
    return metadata, compressed(metadata, message.value, compression)


def is_plain(message: PendingMessage) -> bool:
    """A message with nothing but its value: no key, properties, times, null flags,
    replication list or transaction (most messages; see PlainMetadata)."""
    return (message.properties is None and message.partition_key is None and message.ordering_key is None
            and not message.event_time and message.deliver_at is None and not message.replicate_to
            and not message.null_value and not message.null_key and message.txn is None)


class PlainMetadata:
    """The MessageMetadata of a producer's plain messages, uncompressed and unencrypted,
    written field by field around the two that vary (sequence id, publish time): byte for
    byte what protobuf writes for `single_metadata`, without building a message per send."""

    __slots__ = ("_head", "_tail", "producer_name", "schema_version")

    def __init__(self, producer_name: str, schema_version: bytes | None) -> None:
        self.producer_name = producer_name
        self.schema_version = schema_version
        name = producer_name.encode()
        self._head = b"\x0a" + encode_varint(len(name)) + name + b"\x10"  # 1: producer_name; 2: sequence_id
        # 16: schema_version (length-delimited), after 3: publish_time
        self._tail = b"\x82\x01" + encode_varint(len(schema_version)) + schema_version if schema_version else b""

    def entry(self, sequence_id: int, publish_time: int, value: bytes) -> bytes:
        body = b"".join((self._head, encode_varint(sequence_id), b"\x18", encode_varint(publish_time), self._tail))
        return entry_of(body, value)


def chunk_entries(metadata: pb.MessageMetadata, payload: bytes, max_message_size: int,
                  sealer: Sealer | None = None) -> Iterator[bytes]:
    """Split a message bigger than the broker's limit into chunk entries, as the Java client does.

    Each chunk's payload is `max_message_size` less the metadata's size (so a chunk entry
    stays within the limit), and every chunk carries `uuid` = producer name + "-" +
    sequence id, `num_chunks_from_msg`, `total_chunk_msg_size` (the compressed size) and
    its `chunk_id`. The caller sends them with CommandSend.is_chunk and one sequence id.
    With a `sealer`, each chunk is encrypted on its own, as both official clients do (the
    consumer decrypts chunks before joining them), and its size leaves room for that.
    """
    metadata.uuid = f"{metadata.producer_name}-{metadata.sequence_id}"
    metadata.total_chunk_msg_size = len(payload)
    metadata.num_chunks_from_msg = 0
    metadata.chunk_id = 0
    # Reserve the metadata's size with its chunk fields at their largest.
    metadata.num_chunks_from_msg = metadata.chunk_id = 0x7FFFFFFF
    sealing = 0 if sealer is None else sealer.overhead()
    chunk_size = max(1, max_message_size - metadata.ByteSize() - 16 - sealing)
    chunks = max(1, math.ceil(len(payload) / chunk_size))
    metadata.num_chunks_from_msg = chunks
    for chunk_id in range(chunks):
        metadata.chunk_id = chunk_id
        chunk = payload[chunk_id * chunk_size:(chunk_id + 1) * chunk_size]
        yield build_entry(metadata, chunk if sealer is None else sealer.encrypt(metadata, chunk))
