"""Builders for the commands a broker sends, with every required field set.

The official client drops the whole connection when a frame lacks a required
field, so each builder takes exactly the fields that are required and returns
the encoded frame; optional fields are passed only where they mean something.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from magnetar.wire.frames import FRAME_SIZES, encode_command, encode_payload_header
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


def message_id_data(ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1) -> pb.MessageIdData:
    return MessageId(ledger_id, entry_id, partition, batch_index).to_proto()


def connected(server_version: str, protocol_version: int, max_message_size: int) -> bytes:
    return encode_command(
        T(
            type=T.CONNECTED,
            connected=pb.CommandConnected(
                server_version=server_version, protocol_version=protocol_version, max_message_size=max_message_size
            ),
        )
    )


def ping() -> bytes:
    return encode_command(T(type=T.PING, ping=pb.CommandPing()))


def pong() -> bytes:
    return encode_command(T(type=T.PONG, pong=pb.CommandPong()))


def success(request_id: int) -> bytes:
    return encode_command(T(type=T.SUCCESS, success=pb.CommandSuccess(request_id=request_id)))


def error(request_id: int, code: int, message: str) -> bytes:
    return encode_command(
        T(type=T.ERROR, error=pb.CommandError(request_id=request_id, error=code, message=message))
    )


def partitioned_metadata_response(request_id: int, partitions: int) -> bytes:
    resp = pb.CommandPartitionedTopicMetadataResponse(
        request_id=request_id, partitions=partitions, response=pb.CommandPartitionedTopicMetadataResponse.Success
    )
    return encode_command(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))


def partitioned_metadata_error(request_id: int, code: int, message: str) -> bytes:
    resp = pb.CommandPartitionedTopicMetadataResponse(
        request_id=request_id,
        response=pb.CommandPartitionedTopicMetadataResponse.Failed,
        error=code,
        message=message,
    )
    return encode_command(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))


def lookup_connect(request_id: int, service_url: str | None, service_url_tls: str | None = None) -> bytes:
    resp = pb.CommandLookupTopicResponse(
        request_id=request_id, response=pb.CommandLookupTopicResponse.Connect, authoritative=True
    )
    if service_url is not None:
        resp.brokerServiceUrl = service_url
    if service_url_tls is not None:
        resp.brokerServiceUrlTls = service_url_tls
    return encode_command(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=resp))


def lookup_error(request_id: int, code: int, message: str) -> bytes:
    resp = pb.CommandLookupTopicResponse(
        request_id=request_id, response=pb.CommandLookupTopicResponse.Failed, error=code, message=message
    )
    return encode_command(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=resp))


def producer_success(
    request_id: int, producer_name: str, last_sequence_id: int = -1, topic_epoch: int | None = None,
    schema_version: bytes = b"",
) -> bytes:
    """`schema_version`: the registry's version of the producer's schema (8 bytes), which the
    client stamps on every message; empty for a producer without a schema."""
    resp = pb.CommandProducerSuccess(
        request_id=request_id, producer_name=producer_name, last_sequence_id=last_sequence_id
    )
    if schema_version:
        resp.schema_version = schema_version
    if topic_epoch is not None:
        resp.topic_epoch = topic_epoch
    return encode_command(T(type=T.PRODUCER_SUCCESS, producer_success=resp))


def send_receipt(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int) -> bytes:
    return ReceiptEncoder(producer_id).encode(((sequence_id, highest_sequence_id),), ((ledger_id, entry_id),))


class ReceiptEncoder:
    """SEND_RECEIPT frames for one producer, encoded by refilling one command.

    A receipt goes out for every unbatched message, and building a fresh protobuf command
    for each cost four times as much as setting the three fields that change on a kept
    one. Not thread-safe: one per producer, used on its connection's thread.
    """

    __slots__ = ("_command", "_message_id", "_receipt")

    def __init__(self, producer_id: int) -> None:
        self._command = T(type=T.SEND_RECEIPT, send_receipt=pb.CommandSendReceipt(
            producer_id=producer_id, sequence_id=0, message_id=pb.MessageIdData(ledgerId=0, entryId=0)))
        self._receipt = self._command.send_receipt
        self._message_id = self._receipt.message_id

    def encode(self, sequence_ids: Iterable[Sequence[int]], positions: Iterable[Sequence[int]]) -> bytes:
        """The frames for receipts in order: each of `sequence_ids` starts with (sequence_id,
        highest_sequence_id) and may hold more after them (a broker's record of the SEND), each
        position is (ledger_id, entry_id). Taking the records as they are spares a tuple per
        receipt; only a duplicate's receipt carries -1:-1, which travels as uint64."""
        receipt, message_id = self._receipt, self._message_id
        serialize, pack = self._command.SerializeToString, FRAME_SIZES.pack
        parts: list[bytes] = []
        append = parts.append
        current_ledger = None  # a group's receipts share their ledger: set it once
        for ids, (ledger_id, entry_id) in zip(sequence_ids, positions, strict=True):
            receipt.sequence_id = ids[0]
            receipt.highest_sequence_id = ids[1]
            if ledger_id != current_ledger:
                message_id.ledgerId = ledger_id if ledger_id >= 0 else ledger_id % _U64
                current_ledger = ledger_id
            message_id.entryId = entry_id if entry_id >= 0 else entry_id % _U64
            body = serialize()  # every required field was set in __init__
            append(pack(len(body) + 4, len(body)))
            append(body)
        return b"".join(parts)


_U64 = 1 << 64


def send_error(producer_id: int, sequence_id: int, code: int, message: str) -> bytes:
    err = pb.CommandSendError(producer_id=producer_id, sequence_id=sequence_id, error=code, message=message)
    return encode_command(T(type=T.SEND_ERROR, send_error=err))


def close_producer(producer_id: int, assigned_url: str | None = None, assigned_url_tls: str | None = None) -> bytes:
    """The broker closed a producer. The assigned URLs (PIP-307: the broker now serving the
    topic) make the official client come back at once instead of after its backoff."""
    close = pb.CommandCloseProducer(producer_id=producer_id, request_id=0)
    if assigned_url:
        close.assignedBrokerServiceUrl = assigned_url
    if assigned_url_tls:
        close.assignedBrokerServiceUrlTls = assigned_url_tls
    return encode_command(T(type=T.CLOSE_PRODUCER, close_producer=close))


def close_consumer(consumer_id: int) -> bytes:
    return encode_command(
        T(type=T.CLOSE_CONSUMER, close_consumer=pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=0))
    )


def reached_end_of_topic(consumer_id: int) -> bytes:
    end = pb.CommandReachedEndOfTopic(consumer_id=consumer_id)
    return encode_command(T(type=T.REACHED_END_OF_TOPIC, reachedEndOfTopic=end))


def active_consumer_change(consumer_id: int, is_active: bool) -> bytes:
    change = pb.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active)
    return encode_command(T(type=T.ACTIVE_CONSUMER_CHANGE, active_consumer_change=change))


def message_header(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    entry_size: int,
    redelivery_count: int = 0,
    ack_set: Sequence[int] = (),
) -> bytes:
    """A MESSAGE frame up to its entry, which follows it on the wire: joined to it for a small
    entry, written apart (not copied) for a large one."""
    msg = pb.CommandMessage(consumer_id=consumer_id, message_id=message_id_data(ledger_id, entry_id, partition))
    if redelivery_count:
        msg.redelivery_count = redelivery_count
    if ack_set:
        msg.ack_set.extend(ack_set)
    return encode_payload_header(T(type=T.MESSAGE, message=msg), entry_size)


class MessageHeaderEncoder:
    """MESSAGE frame headers for one connection's consumers, encoded by refilling one command.

    Every unbatched entry dispatched costs a MESSAGE command, and building a fresh protobuf
    one each time (the command, its MessageIdData, the BaseCommand around them) was the
    largest part of delivering it; only the consumer, the position and the partition change
    from one to the next. The bytes are message_header's: a redelivered entry or one with
    an ack set (rare) is encoded by it afresh. Not thread-safe: one per connection, used on
    its thread.
    """

    __slots__ = ("_command", "_message", "_message_id", "_partition")

    def __init__(self) -> None:
        self._command = T(type=T.MESSAGE, message=pb.CommandMessage(
            consumer_id=0, message_id=pb.MessageIdData(ledgerId=0, entryId=0)))
        self._message = self._command.message
        self._message_id = self._message.message_id
        self._partition = -1

    def encode(self, consumer_id: int, ledger_id: int, entry_id: int, partition: int, entry_size: int,
               redelivery_count: int = 0, ack_set: Sequence[int] = ()) -> bytes:
        """message_header(...) for the same arguments."""
        if redelivery_count or ack_set or ledger_id < 0 or entry_id < 0:
            return message_header(consumer_id, ledger_id, entry_id, partition, entry_size, redelivery_count, ack_set)
        message_id = self._message_id
        self._message.consumer_id = consumer_id
        message_id.ledgerId = ledger_id
        message_id.entryId = entry_id
        if partition != self._partition:
            if partition == -1:
                message_id.ClearField("partition")  # message_id_data leaves -1 out, as Pulsar does
            else:
                message_id.partition = partition
            self._partition = partition
        body = self._command.SerializeToString()
        return FRAME_SIZES.pack(len(body) + 4 + entry_size, len(body)) + body


def last_message_id_response(
    request_id: int, last: pb.MessageIdData, mark_delete: pb.MessageIdData | None
) -> bytes:
    resp = pb.CommandGetLastMessageIdResponse(request_id=request_id, last_message_id=last)
    if mark_delete is not None:
        resp.consumer_mark_delete_position.CopyFrom(mark_delete)
    return encode_command(T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=resp))


def topics_of_namespace_response(
    request_id: int, topics: Sequence[str], *, topics_hash: str | None = None, filtered: bool = False,
    changed: bool = True,
) -> bytes:
    """`filtered`: the broker applied the client's pattern; `changed=False` (with no topics):
    the list still has the hash the client sent."""
    resp = pb.CommandGetTopicsOfNamespaceResponse(request_id=request_id, topics=topics, filtered=filtered,
                                                  changed=changed)
    if topics_hash is not None:
        resp.topics_hash = topics_hash
    return encode_command(T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=resp))


def get_schema_error(request_id: int, code: int, message: str) -> bytes:
    resp = pb.CommandGetSchemaResponse(request_id=request_id, error_code=code, error_message=message)
    return encode_command(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=resp))


def get_schema_response(request_id: int, schema: pb.Schema, schema_version: bytes) -> bytes:
    resp = pb.CommandGetSchemaResponse(request_id=request_id, schema=schema, schema_version=schema_version)
    return encode_command(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=resp))


def get_or_create_schema_response(request_id: int, schema_version: bytes) -> bytes:
    resp = pb.CommandGetOrCreateSchemaResponse(request_id=request_id, schema_version=schema_version)
    return encode_command(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=resp))


def get_or_create_schema_error(request_id: int, code: int, message: str) -> bytes:
    resp = pb.CommandGetOrCreateSchemaResponse(request_id=request_id, error_code=code, error_message=message)
    return encode_command(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=resp))


def consumer_stats_response(request_id: int, **fields: object) -> bytes:
    resp = pb.CommandConsumerStatsResponse(request_id=request_id, **fields)
    return encode_command(T(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=resp))


def ack_response(consumer_id: int, request_id: int, error_message: str | None = None,
                 code: int = pb.NotAllowedError) -> bytes:
    resp = pb.CommandAckResponse(consumer_id=consumer_id, request_id=request_id)
    if error_message is not None:
        resp.error = code
        resp.message = error_message
    return encode_command(T(type=T.ACK_RESPONSE, ackResponse=resp))


#: The request id of an error that answers no request (a refused CONNECT): Java's -1 as a uint64.
NO_REQUEST_ID = (1 << 64) - 1
#: What AUTH_CHALLENGE carries to ask a client for fresh credentials (Pulsar's AuthData.REFRESH_AUTH_DATA).
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"


def auth_challenge(server_version: str, protocol_version: int, auth_method_name: str, data: bytes) -> bytes:
    challenge = pb.CommandAuthChallenge(server_version=server_version, protocol_version=protocol_version,
                                        challenge=pb.AuthData(auth_method_name=auth_method_name, auth_data=data))
    return encode_command(T(type=T.AUTH_CHALLENGE, authChallenge=challenge))
