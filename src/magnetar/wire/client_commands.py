"""Builders for the commands a client sends, with every required field set.

The broker-side twin is `magnetar.wire.commands`. These mirror what the official C++
client's `Commands.cc` fills in (spec: wire-protocol.md §9), so a broker sees the same
frames from magnetar.client as from `pulsar-client`, plus the feature flags this client
really supports. Each builder returns the encoded frame; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from magnetar.wire.batch import encode_varint
from magnetar.wire.frames import command_frame, encode_command, encode_payload_command, payload_frame
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand

_SEND_HEAD = b"\x08" + encode_varint(T.SEND) + b"\x32"
"""BaseCommand.type = SEND, then the tag of its field 6 (`send`, length-delimited)."""

_ACK_HEAD = b"\x08" + encode_varint(T.ACK) + b"\x52"
"""BaseCommand.type = ACK, then the tag of its field 10 (`ack`, length-delimited)."""

PROTOCOL_VERSION = 21
"""What the official 3.x clients announce at most; brokers answer with the version they share."""


def _key_values(pairs: Mapping[str, str] | None) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in (pairs or {}).items()]


def connect(client_version: str, *, auth_method_name: str = "none", auth_data: bytes | None = None,
            proxy_to_broker_url: str | None = None) -> bytes:
    """CONNECT announcing broker entry metadata support, so PIP-70 prefixes reach the client,
    and replication's deduplication by source position (a replicator's producer sends them).

    The authentication fields are parameters, not constants, so an authentication provider
    (a later issue) fills them without touching the connection code.
    """
    flags = pb.FeatureFlags(
        supports_auth_refresh=True,
        supports_broker_entry_metadata=True,
        supports_get_partitioned_metadata_without_auto_creation=True,
        supports_repl_dedup_by_lid_and_eid=True,  # as the Java client: a replicator on it sends source positions
    )
    body = pb.CommandConnect(
        client_version=client_version,
        protocol_version=PROTOCOL_VERSION,
        auth_method_name=auth_method_name,
        feature_flags=flags,
    )
    if auth_data is not None:
        body.auth_data = auth_data
    if proxy_to_broker_url is not None:
        body.proxy_to_broker_url = proxy_to_broker_url
    return encode_command(T(type=T.CONNECT, connect=body))


def ping() -> bytes:
    return encode_command(T(type=T.PING, ping=pb.CommandPing()))


def pong() -> bytes:
    return encode_command(T(type=T.PONG, pong=pb.CommandPong()))


def partitioned_metadata(request_id: int, topic: str, *, auto_create: bool = True) -> bytes:
    body = pb.CommandPartitionedTopicMetadata(topic=topic, request_id=request_id)
    if not auto_create:
        body.metadata_auto_creation_enabled = False
    return encode_command(T(type=T.PARTITIONED_METADATA, partitionMetadata=body))


def lookup(request_id: int, topic: str, *, authoritative: bool = False, listener_name: str = "") -> bytes:
    body = pb.CommandLookupTopic(
        topic=topic, request_id=request_id, authoritative=authoritative, advertised_listener_name=listener_name
    )
    return encode_command(T(type=T.LOOKUP, lookupTopic=body))


def topics_of_namespace(request_id: int, namespace: str,
                        mode: int = pb.CommandGetTopicsOfNamespace.PERSISTENT) -> bytes:
    body = pb.CommandGetTopicsOfNamespace(request_id=request_id, namespace=namespace, mode=mode)
    return encode_command(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=body))


def producer(
    request_id: int,
    producer_id: int,
    topic: str,
    *,
    producer_name: str | None = None,
    user_provided_name: bool = False,
    epoch: int = 0,
    access_mode: int = pb.Shared,
    properties: Mapping[str, str] | None = None,
    topic_epoch: int | None = None,
    initial_subscription_name: str | None = None,
    schema: pb.Schema | None = None,
    encrypted: bool = False,
) -> bytes:
    body = pb.CommandProducer(
        topic=topic,
        producer_id=producer_id,
        request_id=request_id,
        encrypted=encrypted,
        epoch=epoch,
        user_provided_producer_name=user_provided_name,
        producer_access_mode=access_mode,
        metadata=_key_values(properties),
    )
    if producer_name:
        body.producer_name = producer_name
    if topic_epoch is not None:
        body.topic_epoch = topic_epoch
    if initial_subscription_name is not None:
        body.initial_subscription_name = initial_subscription_name
    if schema is not None:
        body.schema.CopyFrom(schema)
    return encode_command(T(type=T.PRODUCER, producer=body))


def send(producer_id: int, sequence_id: int, entry: bytes | memoryview, *, num_messages: int | None = None,
         highest_sequence_id: int | None = None, is_chunk: bool = False,
         txn: tuple[int, int] | None = None) -> bytes:
    """SEND + entry. `num_messages` only for batches, as the C++ producer does; `txn` is
    the (most, least) bits of the transaction the message belongs to."""
    if txn is None and highest_sequence_id is None and not is_chunk:
        # Every SEND outside a transaction, once per message unbatched: written field by
        # field, byte for byte what protobuf writes, without building two messages first.
        body = b"".join((b"\x08", encode_varint(producer_id), b"\x10", encode_varint(sequence_id),
                         b"" if num_messages is None else b"\x18" + encode_varint(num_messages)))
        return payload_frame(b"".join((_SEND_HEAD, encode_varint(len(body)), body)), entry)
    body = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    if txn is not None:
        body.txnid_most_bits, body.txnid_least_bits = txn
    if num_messages is not None:
        body.num_messages = num_messages
    if highest_sequence_id is not None:
        body.highest_sequence_id = highest_sequence_id
    if is_chunk:
        body.is_chunk = True
    return encode_payload_command(T(type=T.SEND, send=body), entry)


def close_producer(request_id: int, producer_id: int) -> bytes:
    body = pb.CommandCloseProducer(producer_id=producer_id, request_id=request_id)
    return encode_command(T(type=T.CLOSE_PRODUCER, close_producer=body))


def subscribe(
    request_id: int,
    consumer_id: int,
    topic: str,
    subscription: str,
    sub_type: int,
    *,
    consumer_name: str = "",
    durable: bool = True,
    start_message_id: MessageId | None = None,
    initial_position: int = pb.CommandSubscribe.Latest,
    read_compacted: bool = False,
    properties: Mapping[str, str] | None = None,
    subscription_properties: Mapping[str, str] | None = None,
    key_shared_mode: int | None = None,
    sticky_ranges: Sequence[tuple[int, int]] = (),
    allow_out_of_order: bool = False,
    force_topic_creation: bool = True,
    replicate_subscription_state: bool = False,
    priority_level: int = 0,
    schema: pb.Schema | None = None,
) -> bytes:
    body = pb.CommandSubscribe(
        topic=topic,
        subscription=subscription,
        subType=sub_type,
        consumer_id=consumer_id,
        request_id=request_id,
        consumer_name=consumer_name,
        priority_level=priority_level,
        durable=durable,
        metadata=_key_values(properties),
        read_compacted=read_compacted,
        initialPosition=initial_position,
        replicate_subscription_state=replicate_subscription_state,
        subscription_properties=_key_values(subscription_properties),
    )
    if start_message_id is not None:
        body.start_message_id.CopyFrom(start_message_id.to_proto())
    if not force_topic_creation:
        body.force_topic_creation = False
    if key_shared_mode is not None:
        meta = body.keySharedMeta
        meta.keySharedMode = key_shared_mode
        meta.allowOutOfOrderDelivery = allow_out_of_order
        for start, end in sticky_ranges:
            meta.hashRanges.add(start=start, end=end)
    if schema is not None:
        body.schema.CopyFrom(schema)
    return encode_command(T(type=T.SUBSCRIBE, subscribe=body))


def get_schema(request_id: int, topic: str, version: bytes | None = None) -> bytes:
    """GET_SCHEMA: the topic's schema of `version` (8 bytes), the latest when None."""
    body = pb.CommandGetSchema(request_id=request_id, topic=topic)
    if version is not None:
        body.schema_version = version
    return encode_command(T(type=T.GET_SCHEMA, getSchema=body))


def get_or_create_schema(request_id: int, topic: str, schema: pb.Schema) -> bytes:
    """GET_OR_CREATE_SCHEMA: register `schema` on the topic (or find it there); the answer names its version."""
    body = pb.CommandGetOrCreateSchema(request_id=request_id, topic=topic, schema=schema)
    return encode_command(T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=body))


def flow(consumer_id: int, permits: int) -> bytes:
    return encode_command(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits)))


def ack(consumer_id: int, ids: Iterable[pb.MessageIdData], *, cumulative: bool = False,
        validation_error: int | None = None) -> bytes:
    """One ACK for many ids (grouped individual acks) or one cumulative id."""
    body = pb.CommandAck(
        consumer_id=consumer_id,
        ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
        message_id=ids,
    )
    if validation_error is not None:
        body.validation_error = validation_error
    return encode_command(T(type=T.ACK, ack=body))


def ack_ids(consumer_id: int, ids: Iterable[tuple[int, int, Sequence[int]]], *, cumulative: bool = False) -> bytes:
    """`ack` of (ledger, entry, ack set words) ids, written field by field, byte for byte what
    protobuf writes: a consumer's acknowledgements leave in groups of up to a thousand, and
    a MessageIdData object per id cost more than everything else an acknowledgement costs."""
    parts = [b"\x08", encode_varint(consumer_id), b"\x10\x01" if cumulative else b"\x10\x00"]
    for ledger, entry, ack_set in ids:
        data = b"".join((b"\x08", encode_varint(ledger), b"\x10", encode_varint(entry),
                         *(b"\x28" + encode_varint(word) for word in ack_set)))  # 5: ack_set, unpacked
        parts += (b"\x1a", encode_varint(len(data)), data)  # 3: message_id
    body = b"".join(parts)
    return command_frame(b"".join((_ACK_HEAD, encode_varint(len(body)), body)))


def redeliver(consumer_id: int, ids: Iterable[MessageId] = ()) -> bytes:
    """No ids means "everything unacked" (Exclusive/Failover); ids carry ledger and entry only."""
    body = pb.CommandRedeliverUnacknowledgedMessages(consumer_id=consumer_id)
    for mid in ids:
        body.message_ids.append(MessageId(mid.ledger_id, mid.entry_id).to_proto())
    return encode_command(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=body))


def seek(request_id: int, consumer_id: int, *, message_id: MessageId | None = None,
         publish_time: int | None = None) -> bytes:
    """By id (ledger and entry only, as C++ sends it) or by publish time in ms."""
    body = pb.CommandSeek(consumer_id=consumer_id, request_id=request_id)
    if message_id is not None:
        body.message_id.CopyFrom(MessageId(message_id.ledger_id, message_id.entry_id).to_proto())
    elif publish_time is not None:
        body.message_publish_time = publish_time
    else:
        raise ValueError("seek needs a message id or a publish time")
    return encode_command(T(type=T.SEEK, seek=body))


def get_last_message_id(request_id: int, consumer_id: int) -> bytes:
    body = pb.CommandGetLastMessageId(consumer_id=consumer_id, request_id=request_id)
    return encode_command(T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=body))


def unsubscribe(request_id: int, consumer_id: int) -> bytes:
    body = pb.CommandUnsubscribe(consumer_id=consumer_id, request_id=request_id)
    return encode_command(T(type=T.UNSUBSCRIBE, unsubscribe=body))


def close_consumer(request_id: int, consumer_id: int) -> bytes:
    body = pb.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id)
    return encode_command(T(type=T.CLOSE_CONSUMER, close_consumer=body))


def auth_response(client_version: str, auth_method_name: str, auth_data: bytes) -> bytes:
    """The answer to AUTH_CHALLENGE: fresh credentials of the same method."""
    response = pb.CommandAuthResponse(client_version=client_version, protocol_version=PROTOCOL_VERSION,
                                      response=pb.AuthData(auth_method_name=auth_method_name, auth_data=auth_data))
    return encode_command(T(type=T.AUTH_RESPONSE, authResponse=response))
