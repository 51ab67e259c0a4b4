"""Pulsar's REST producer: `POST /topics/persistent/{tenant}/{namespace}/{topic}` (and
`.../partitions/{partition}`) publishes the messages of a JSON body, for a test from
`curl` or the web console's produce form.

The body is Pulsar's ProducerMessages, `{"valueSchema", "keySchema", "producerName",
"messages": [{"key", "payload", "properties", "eventTime", "sequenceId"}]}`; the answer its
ProduceMessageResponse, `{"messagePublishResults": [{"messageId": "ledger:entry:partition",
"errorCode": 0, "error": ""}], "schemaVersion"}` (-1 when the topic has no schema), sent
once every message is durable. Each message is one entry (no batching), stored through the
topic's own publish path and held to what a producer is held to: a terminated topic, the
backlog quota, the schema (the request's valueSchema is registered as a producer's would
be, else the topic's latest is used), required encryption (which a REST producer cannot
meet), the message size limits and the publish rate (the answer waits out the throttle).

Bounded: a body of at most MAX_BODY_BYTES and MAX_MESSAGES messages; anything malformed is
refused as a whole with a 400 naming the message and the problem, and nothing is stored.
Values are encoded as produce_values says.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar import web
from magnetar.admin.loop_slices import LoopSlices
from magnetar.admin.responses import INT64_MAX, fail, json_body
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.schema_registry import settled
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.topics.topic_limits import send_limits
from magnetar.schemas import InvalidSchemaError, SchemaData, SchemaNotFoundError, SchemaType, schema_id
from magnetar.schemas.model import version_bytes
from magnetar.storage import Position
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.admin.produce_values import Encoder

TOPIC = "/topics/persistent/{tenant}/{namespace}/{topic}"
PARTITION = TOPIC + "/partitions/{partition}"
MAX_BODY_BYTES = 1024 * 1024
"""A request's body at most: parsed on the event loop, so kept to a few milliseconds' work."""
MAX_MESSAGES = 1000
"""Messages in one request at most."""
DEFAULT_PRODUCER = "rest-producer"
NO_SCHEMA = -1


@dataclass(frozen=True, slots=True)
class _Schema:
    data: SchemaData | None
    version: int


class RestProducerApi:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._next_partition = 0
        """Where the next message without a partition in its path goes (round robin)."""

    def routes(self) -> list[web.RouteDef]:
        return [web.route("POST", TOPIC, self.produce, max_body=MAX_BODY_BYTES),
                web.route("POST", PARTITION, self.produce, max_body=MAX_BODY_BYTES)]

    async def produce(self, request: web.Request) -> web.Response:
        name, partition = self._target(request)
        body = await json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise fail(400, 'the body must be {"messages": [{"payload": ...}, ...]} (Pulsar\'s ProducerMessages)')
        messages = body["messages"]
        if not 0 < len(messages) <= MAX_MESSAGES:
            raise fail(400, f"messages must hold 1 to {MAX_MESSAGES} messages, not {len(messages)}")
        _check_key_schema(body.get("keySchema"))
        producer = body.get("producerName") or DEFAULT_PRODUCER
        if not isinstance(producer, str):
            raise fail(400, "producerName must be a string")
        partitions = self._partitions(name, partition, len(messages))
        topics = {p: self._topic(name, p) for p in set(partitions)}
        schema = self._schema(name, body.get("valueSchema"))
        prepared = await self._messages(messages, producer, schema)
        self._admit(topics.values())
        version = await self._register(name, schema, body.get("valueSchema") is not None)
        entries = [build_entry(_stamped(metadata, version), payload) for metadata, payload in prepared]
        throttle = self._check(topics.values(), entries)
        ids = await self._publish(topics, partitions, entries)
        if throttle > 0:  # the publish rate: a REST producer waits as a throttled connection would
            await asyncio.sleep(min(throttle, self.service.config.webServiceRequestTimeoutSeconds / 2))
        return web.json_response({"messagePublishResults": [{"messageId": i, "errorCode": 0, "error": ""} for i in ids],
                                  "schemaVersion": version})

    # -- where to
    def _target(self, request: web.Request) -> tuple[TopicName, int | None]:
        info = request.match_info
        try:
            name = self.service.parse_topic(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
        except BrokerServiceError as exc:
            raise fail(412, exc.message) from exc
        if name.partition_index >= 0:
            raise fail(412, f"{name} names a partition: use {PARTITION}")
        raw = info.get("partition")
        if raw is None:
            return name, None
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
            raise fail(412, f"partition must be a partition's number, not {raw[:40]!r}")
        return name, int(raw)

    def _partitions(self, name: TopicName, partition: int | None, count: int) -> list[int]:
        """Each message's partition (-1: the topic is not partitioned)."""
        partitions = self.service.partitions_of(name)
        if partition is not None:
            if not partitions or partition >= partitions:
                raise fail(404, f"{name} has no partition {partition}")
            return [partition] * count
        if not partitions:
            return [-1] * count
        start, self._next_partition = self._next_partition, self._next_partition + count
        return [(start + i) % partitions for i in range(count)]

    def _topic(self, name: TopicName, partition: int) -> PersistentTopic:
        target = name if partition < 0 else name.partition(partition)
        topic = self.service.get_topic(str(target), create=False)  # TopicNotFound: 404
        assert isinstance(topic, PersistentTopic)  # the route names the persistent domain
        return topic

    # -- what
    def _schema(self, name: TopicName, requested: Any) -> _Schema:
        """The schema the values are encoded with: the request's valueSchema (its version
        still to come, see _register), else the topic's latest (None: the topic has none)."""
        if requested is not None:
            return _Schema(_schema_data(requested), NO_SCHEMA)
        try:
            latest = self.service.schemas.registry.get(schema_id(name), None)
        except SchemaNotFoundError:
            return _Schema(None, NO_SCHEMA)
        return _Schema(latest.schema, latest.version)

    async def _register(self, name: TopicName, schema: _Schema, requested: bool) -> int:
        """The request's valueSchema registered as a producer's schema is (BYTES: a producer
        without one), once every value was found to fit it: its version."""
        if not requested:
            return schema.version
        registered = None if schema.data is None or schema.data.type == SchemaType.BYTES else schema.data
        try:
            raw = await settled(lambda: self.service.schemas.add_schema(name, registered))
        except (BrokerServiceError, InvalidSchemaError) as exc:
            raise fail(400, f"valueSchema refused: {getattr(exc, 'message', exc)}") from None
        return int.from_bytes(raw, "big", signed=True) if raw else NO_SCHEMA

    @staticmethod
    async def _messages(messages: list[Any], producer: str,
                        schema: _Schema) -> list[tuple[pb.MessageMetadata, bytes]]:
        """Each message's metadata and encoded value, other clients given a turn of the loop
        after each slice of work (loop_slices; a full request of Avro records is about 8 ms)."""
        from magnetar.admin.produce_values import encoder_for  # noqa: PLC0415 (loaded by the first request)

        try:
            encode = encoder_for(schema.data)
        except ValueError as exc:
            raise fail(400, str(exc)) from None
        now = int(time.time() * 1000)
        prepared = []
        slices = LoopSlices()
        for n, message in enumerate(messages):
            try:
                prepared.append(_message(message, encode, producer, now, n))
            except ValueError as exc:
                raise fail(400, f"messages[{n}]: {exc}") from None
            if slices.spent():
                await slices.next()
        return prepared

    @staticmethod
    def _admit(topics: Iterable[PersistentTopic]) -> None:
        """What a producer is refused for, asked before the request's schema is registered."""
        for topic in topics:
            topic.check_publisher()  # terminated, over the backlog quota
            if send_limits(topic).encryption_required:
                raise fail(412, f"{topic.name} requires encrypted messages, which the REST producer cannot send")

    def _check(self, topics: Iterable[PersistentTopic], entries: list[bytes]) -> float:
        """What a producer's sends are refused for (their size); the throttle the publish rate asks for."""
        largest = max(map(len, entries))
        throttle = 0.0
        for topic in topics:
            limits = send_limits(topic)
            limit = min(self.service.config.maxMessageSize, limits.max_message_size or INT64_MAX)
            if largest > limit:
                raise fail(400, f"a message of {largest} bytes exceeds maxMessageSize ({limit} bytes)")
            if limits.publish_limiter is not None:
                throttle = max(throttle, limits.publish_limiter.consume(len(entries), sum(map(len, entries))))
        return throttle

    # -- storing
    async def _publish(self, topics: dict[int, PersistentTopic], partitions: list[int],
                       entries: list[bytes]) -> list[str]:
        """Each message's id once all are durable (each partition's share as one group)."""
        loop = asyncio.get_running_loop()
        ids: list[str] = [""] * len(entries)
        waits = []
        shares: dict[int, list[int]] = {}
        for i, partition in enumerate(partitions):
            shares.setdefault(partition, []).append(i)
        for partition, topic in topics.items():
            indexes = shares[partition]
            stored: asyncio.Future[list[Position]] = loop.create_future()

            def done(positions: list[Position] | None, exc: BaseException | None,
                     stored: asyncio.Future[list[Position]] = stored) -> None:
                if stored.done():
                    return
                if exc is not None or positions is None:
                    stored.set_exception(exc or RuntimeError("the write failed"))
                else:
                    stored.set_result(positions)

            group = [entries[i] for i in indexes]
            topic.publish_many(group, [1] * len(group), 1, done)
            waits.append((partition, indexes, stored))
        for partition, indexes, stored in waits:
            for i, position in zip(indexes, await stored, strict=True):
                ids[i] = f"{position.ledger_id}:{position.entry_id}:{partition}"
        return ids


def _check_key_schema(key_schema: Any) -> None:
    if key_schema is not None and _schema_data(key_schema).type not in (SchemaType.STRING, SchemaType.NONE):
        raise fail(400, "keySchema: the REST producer takes keys as strings (a STRING key schema, or none)")


def _schema_data(raw: Any) -> SchemaData:
    """A schema as Pulsar's REST producer names it: the JSON (or a string of it) of
    `{"type": "AVRO", "schema": "<definition>", "properties": {}}` ("data" for "schema" too)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            raise fail(400, "a schema must be a JSON object (or a string of one)") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise fail(400, 'a schema is {"type": "AVRO", "schema": "<definition>", "properties": {}}')
    definition = raw.get("schema", raw.get("data")) or ""
    if not isinstance(definition, str):
        definition = json.dumps(definition)
    properties = raw.get("properties") or {}
    if not isinstance(properties, dict) or not all(isinstance(v, str) for v in properties.values()):
        raise fail(400, "a schema's properties must be an object of strings")
    try:
        kind = SchemaType.parse(raw["type"])
    except InvalidSchemaError as exc:
        raise fail(400, str(exc)) from None
    return SchemaData(kind, definition.encode(), properties)


def _message(message: Any, encode: Encoder, producer: str, now: int, sequence: int) -> tuple[pb.MessageMetadata, bytes]:
    if not isinstance(message, dict) or "payload" not in message:
        raise ValueError('a message is {"payload": ..., "key", "properties", "eventTime", "sequenceId"}')
    payload = encode(message["payload"])
    metadata = pb.MessageMetadata(producer_name=producer, publish_time=now,
                                  sequence_id=_long(message, "sequenceId", sequence), uncompressed_size=len(payload))
    key = message.get("key")
    if key is not None:
        if not isinstance(key, str):
            raise ValueError("key must be a string")
        metadata.partition_key = key
    properties = message.get("properties") or {}
    if not isinstance(properties, dict) or not all(isinstance(v, str) for v in properties.values()):
        raise ValueError("properties must be an object of strings")
    metadata.properties.extend(pb.KeyValue(key=k, value=v) for k, v in properties.items())
    event_time = _long(message, "eventTime", 0)
    if event_time > 0:
        metadata.event_time = event_time
    return metadata, payload


def _stamped(metadata: pb.MessageMetadata, version: int) -> pb.MessageMetadata:
    if version >= 0:
        metadata.schema_version = version_bytes(version)
    return metadata


def _long(message: dict[str, Any], field: str, default: int) -> int:
    value = message.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
        raise ValueError(f"{field} must be a non-negative integer")
    return value
