"""What a SEND must satisfy before anything is stored: consumers could not read the rest.

Each check answers None (publish it) or the (ServerError, message) the producer gets in
SEND_ERROR; the connection stays up, as in Pulsar. Only metadata is parsed, never a
Pulsar payload: a batch's count is checked against its size, a foreign entry's (PIP-96)
against its own header (unless encrypted: then nobody here can read it), a delivery delay
against the topic's delayedDelivery policy, and where the namespace requires encryption a
message without `encryption_keys` is refused (MetadataError, Pulsar's answer).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from magnetar.broker.topics.topic_limits import delayed_delivery, send_limits
from magnetar.wire.entry import PULSAR_FORMAT, entry_format, parse_entry, validate_publishable
from magnetar.wire.errors import ChecksumError, WireError
from magnetar.wire.frames import FRAME_PADDING
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_topic import AbstractTopic

Refusal = tuple[int, str]

KAFKA_PRODUCER_PREFIX = "kafka:"
"""Producer names the Kafka listener gives the entries it stores (`kafka:<id>:<epoch>`), by
which its idempotence recovery finds a Kafka producer's batches after a restart: a Pulsar
SEND may not carry one, nor a Kafka batch that names a producer, or any writer to a topic
could pass its messages off as a Kafka producer's and fence that producer out."""


def check_send(send: pb.CommandSend, payload: bytes | None, topic: AbstractTopic,
               max_message_size: int, *, replicator: bool = False) -> Refusal | None:
    """Why the SEND is refused, or None. `replicator`: the producer is another cluster's
    replicator, the only one whose entries may be markers (a marker from anyone else could
    move replicated subscriptions, here and in every cluster it would be replicated to)."""
    if not payload:
        return pb.NotAllowedError, "SEND without a message"
    if len(payload) > max_message_size + FRAME_PADDING // 2:
        return pb.NotAllowedError, f"message of {len(payload)} bytes exceeds maxMessageSize"
    limits = send_limits(topic)
    topic_limit = limits.max_message_size
    if topic_limit is not None and len(payload) > topic_limit:
        return pb.NotAllowedError, f"Exceed maximum message size: {len(payload)} bytes, the topic takes {topic_limit}"
    try:
        metadata = validate_publishable(payload, checksum=True)
    except ChecksumError:
        return pb.ChecksumError, "Checksum failed on the broker"
    except WireError as exc:
        return pb.NotAllowedError, f"malformed message: {exc}"
    if not replicator and (refusal := _check_not_posing(metadata)):
        return refusal
    claimed = metadata.num_messages_in_batch or 1  # validated: when present, at least 1
    if claimed != send.num_messages:  # an absent num_messages reads as its default, 1
        return pb.NotAllowedError, (
            f"malformed message: num_messages_in_batch {claimed} disagrees with the SEND's {send.num_messages}")
    if not metadata.encryption_keys:
        if limits.encryption_required:
            return pb.MetadataError, "Messages must be encrypted"
        if metadata.properties and (refusal := _check_foreign_count(metadata, payload, claimed, replicator)):
            return refusal
    return _check_delivery_delay(metadata, topic) if metadata.HasField("deliver_at_time") else None


def _check_not_posing(metadata: pb.MessageMetadata) -> Refusal | None:
    """What only the broker writes: markers (a marker from anyone else could move replicated
    subscriptions, here and in every cluster it is replicated to) and the Kafka listener's
    producer names."""
    if metadata.HasField("marker_type"):
        return pb.NotAllowedError, "marker messages are written by brokers, not by producers"
    if metadata.producer_name.startswith(KAFKA_PRODUCER_PREFIX):
        return pb.NotAllowedError, (f"producer names starting with {KAFKA_PRODUCER_PREFIX!r} are the Kafka "
                                    f"listener's: {metadata.producer_name!r}")
    return None


def _check_delivery_delay(metadata: pb.MessageMetadata, topic: AbstractTopic) -> Refusal | None:
    max_delay = delayed_delivery(topic).max_delay_ms
    if max_delay > 0 and metadata.deliver_at_time - time.time() * 1000 > max_delay:
        return pb.NotAllowedError, f"Exceeds max allowed delivery delay of {max_delay} milliseconds"
    return None


def _check_foreign_count(metadata: pb.MessageMetadata, payload: bytes, claimed: int,
                         replicator: bool) -> Refusal | None:
    """An entry in a format the broker knows (PIP-96: Kafka, Arrow) must hold the messages
    its metadata claims: consumers iterate that many, the official client included. The
    count comes from the format's own header (a Kafka batch's record count, an Arrow
    batch's row count); checksums inside the payload are the consumer's to verify, and a
    format nobody here reads is taken at its word. A Kafka batch from a Pulsar producer names
    no Kafka producer (see KAFKA_PRODUCER_PREFIX). The payload processors are imported by the
    first foreign entry, not by every broker's start-up."""
    fmt = entry_format(metadata)
    if fmt == PULSAR_FORMAT:
        return None
    from magnetar.formats.kafka_records import KAFKA_FORMAT, read_header  # noqa: PLC0415
    from magnetar.formats.payload import PayloadError  # noqa: PLC0415 (see above)
    from magnetar.formats.processor import count_messages  # noqa: PLC0415

    body = parse_entry(payload).payload
    try:
        held = count_messages(fmt, body, verify=False)
        posing = fmt == KAFKA_FORMAT and not replicator and read_header(body, check_crc=False).producer_id >= 0
    except PayloadError as exc:
        return pb.NotAllowedError, f"malformed message: {exc}"
    if held is not None and held != claimed:
        return pb.NotAllowedError, (
            f"malformed message: the {fmt} payload holds {held} messages, num_messages_in_batch says {claimed}")
    if posing:
        return pb.NotAllowedError, ("a Kafka record batch sent by a Pulsar producer names no Kafka producer "
                                    "(producerId -1)")
    return None
