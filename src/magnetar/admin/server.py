"""The admin HTTP API: a subset of Pulsar's REST paths under /admin/v2.

Paths, query parameters and response headers follow Pulsar's, so a Pulsar
user's scripts (and `curl` habits) carry over. Message endpoints return the
decompressed payload as the body and the metadata as `X-Pulsar-*` headers,
including the PIP-70 broker entry metadata, which the official Python client
cannot show.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime

from aiohttp import web
from aiohttp.typedefs import Handler

from magnetar.admin import metrics
from magnetar.broker.errors import BrokerServiceError, InvalidPartitionCountError
from magnetar.broker.message_finder import EntrySequence
from magnetar.broker.non_persistent_topic import NonPersistentTopic
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_name import TopicName
from magnetar.storage import NoSuchEntryError, Position
from magnetar.wire.batch import decompressed_payload
from magnetar.wire.entry import parse_entry
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
#: Paths that serve both domains; the others read storage, which a non-persistent topic has none of.
DOMAIN = "/admin/v2/{domain:persistent|non-persistent}"
ANY_TOPIC = DOMAIN + "/{tenant}/{namespace}/{topic}"
#: Bodies are small JSON or a number; aiohttp answers 413 past this (its default, kept).
MAX_BODY_BYTES = 1024 * 1024
#: webServiceRequestTimeoutSeconds: every admin request, its body included, ends within it.
TIME_BUDGET = web.AppKey("time_budget", float)
_NOT_FOUND = {pb.TopicNotFound, pb.SubscriptionNotFound, pb.ConsumerNotFound}
Mode = pb.CommandGetTopicsOfNamespace


def format_time(millis: int) -> str:
    """Pulsar's admin date format: ISO-8601 with milliseconds and offset."""
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _fail(status: int, reason: str) -> web.HTTPException:
    cls = {400: web.HTTPBadRequest, 404: web.HTTPNotFound, 408: web.HTTPRequestTimeout, 409: web.HTTPConflict,
           412: web.HTTPPreconditionFailed, 500: web.HTTPInternalServerError}.get(status, web.HTTPBadRequest)
    return cls(text=json.dumps({"reason": reason}), content_type="application/json")


def _status_of(error: BrokerServiceError) -> int:
    """The HTTP status Pulsar's admin API gives the same failure."""
    if error.code in _NOT_FOUND:
        return 404
    if isinstance(error, InvalidPartitionCountError) or error.code == pb.InvalidTopicName:
        return 412
    return 500 if error.code == pb.MetadataError else 409


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure answers Pulsar's JSON `{"reason": ...}`; none escapes as a bare 500."""
    try:
        budget = request.app[TIME_BUDGET]
        async with asyncio.timeout(budget):
            return await handler(request)
    except web.HTTPException:
        raise
    except TimeoutError as exc:  # a body trickled in, or a request that never ends
        raise _fail(408, f"request not completed within {request.app[TIME_BUDGET]} s") from exc
    except BrokerServiceError as exc:
        raise _fail(_status_of(exc), exc.message) from exc
    except Exception as exc:
        log.exception("admin request %s %s failed", request.method, request.path)
        raise _fail(500, "internal broker error") from exc


class AdminServer:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.app = web.Application(middlewares=[_errors_as_json], client_max_size=MAX_BODY_BYTES)
        self.app[TIME_BUDGET] = service.config.webServiceRequestTimeoutSeconds
        self.app.add_routes(
            [
                web.get("/admin/v2/brokers/health", self.health),
                web.get("/metrics", self.metrics),
                web.get(DOMAIN + "/{tenant}/{namespace}", self.list_topics),
                web.put(TOPIC, self.create_topic),
                web.get(ANY_TOPIC + "/partitions", self.get_partitions),
                web.put(ANY_TOPIC + "/partitions", self.create_partitioned_topic),
                web.get(ANY_TOPIC + "/stats", self.stats),
                web.get(TOPIC + "/examinemessage", self.examine_message),
                web.get(TOPIC + "/ledger/{ledger}/entry/{entry}", self.get_message_by_id),
                web.get(TOPIC + "/messageTTL", self.get_ttl),
                web.post(TOPIC + "/messageTTL", self.set_ttl),
                web.delete(TOPIC + "/messageTTL", self.remove_ttl),
            ]
        )
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- helpers
    def _topic_name(self, request: web.Request) -> TopicName:
        info = request.match_info
        domain = info.get("domain", "persistent")
        try:
            return self.service.parse_topic(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
        except BrokerServiceError as exc:
            raise _fail(412, exc.message) from exc  # Pulsar: Precondition Failed

    def _topic(self, request: web.Request) -> PersistentTopic | NonPersistentTopic:
        return self.service.get_topic(str(self._topic_name(request)), create=False)

    @staticmethod
    def _int_param(request: web.Request, name: str, default: int | None = None) -> int:
        raw = request.query.get(name)
        if raw is None:
            if default is None:
                raise _fail(400, f"missing query parameter {name}")
            return default
        try:
            return int(raw)
        except ValueError as exc:
            raise _fail(400, f"query parameter {name} must be an integer, not {raw!r}") from exc

    # -- handlers
    async def health(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics(self, _request: web.Request) -> web.Response:
        topics = [*self.service.topics.values(), *self.service.non_persistent_topics.values()]
        return web.Response(text=metrics.render(topics), content_type="text/plain")

    async def list_topics(self, request: web.Request) -> web.Response:
        info = request.match_info
        namespace = f"{info['tenant']}/{info['namespace']}"
        mode = Mode.PERSISTENT if info["domain"] == "persistent" else Mode.NON_PERSISTENT
        return web.json_response(self.service.topics_of_namespace(namespace, mode=mode))

    async def create_topic(self, request: web.Request) -> web.Response:
        name = self._topic_name(request)
        if self.service.topic_exists(name) or self.service.partitions_of(name) is not None:
            raise _fail(409, f"topic {name} already exists")
        self.service.get_topic(str(name))
        return web.Response(status=204)

    async def get_partitions(self, request: web.Request) -> web.Response:
        name = self._topic_name(request)
        return web.json_response({"partitions": self.service.partitions_of(name) or 0})

    async def create_partitioned_topic(self, request: web.Request) -> web.Response:
        name = self._topic_name(request)
        try:
            partitions = int(await request.text())
        except ValueError as exc:
            raise _fail(400, "the body must be the number of partitions") from exc
        self.service.create_partitioned_topic(name, partitions)
        return web.Response(status=204)

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(self._topic(request).stats())

    async def examine_message(self, request: web.Request) -> web.Response:
        """The Nth entry from the start (earliest) or from the end (latest), 1-based."""
        topic = self._topic(request)
        initial = request.query.get("initialPosition", "latest")
        if initial not in ("earliest", "latest"):
            raise _fail(400, "initialPosition must be 'earliest' or 'latest'")
        nth = self._int_param(request, "messagePosition", 1)
        entries = EntrySequence(topic.ledger)
        if not 1 <= nth <= entries.size:
            raise _fail(404, f"no message at position {nth} from {initial} (topic has {entries.size} entries)")
        ordinal = nth - 1 if initial == "earliest" else entries.size - nth
        position = entries.position(ordinal)
        return self._entry_response(position, topic.ledger.read_entry(position))

    async def get_message_by_id(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        try:
            position = Position(int(request.match_info["ledger"]), int(request.match_info["entry"]))
            data = topic.ledger.read_entry(position)
        except ValueError as exc:
            raise _fail(400, "ledger and entry ids must be integers") from exc
        except NoSuchEntryError as exc:
            raise _fail(404, f"Message not found: {exc}") from exc
        return self._entry_response(position, data)

    def _entry_response(self, position: Position, data: bytes) -> web.Response:
        try:
            entry = parse_entry(data)
            md = entry.metadata
            payload = bytes(
                decompressed_payload(md, entry.payload, max_size=self.service.config.maxMessageSize * 2)
            )
        except WireError as exc:
            raise _fail(409, f"entry {position} cannot be decoded: {exc}") from exc
        headers = {
            "X-Pulsar-Message-ID": f"{position.ledger_id}:{position.entry_id}",
            "X-Pulsar-publish-time": format_time(md.publish_time),
            "X-Pulsar-producer-name": md.producer_name,
            "X-Pulsar-sequence-id": str(md.sequence_id),
        }
        for kv in md.properties:
            headers[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
        optional = {
            "partition_key": ("X-Pulsar-partition-key", str),
            "event_time": ("X-Pulsar-event-time", format_time),
            "deliver_at_time": ("X-Pulsar-deliver-at-time", format_time),
            "num_messages_in_batch": ("X-Pulsar-num-batch-message", str),
            "uncompressed_size": ("X-Pulsar-uncompressed-size", str),
        }
        for field, (header, render) in optional.items():
            if md.HasField(field):
                headers[header] = render(getattr(md, field))  # type: ignore[operator]
        if md.HasField("num_messages_in_batch"):
            headers["X-Pulsar-batch-size"] = str(len(payload))
        if md.HasField("compression"):
            headers["X-Pulsar-compression"] = pb.CompressionType.Name(md.compression)
        bem = entry.broker_entry_metadata
        if bem is not None:
            if bem.HasField("broker_timestamp"):
                headers["X-Pulsar-Broker-Entry-METADATA-timestamp"] = format_time(bem.broker_timestamp)
            if bem.HasField("index"):
                headers["X-Pulsar-Broker-Entry-METADATA-index"] = str(bem.index)
        return web.Response(body=payload, headers=headers, content_type="application/octet-stream")

    async def get_ttl(self, request: web.Request) -> web.Response:
        value = self.service.topic_policy(self._topic_name(request), "messageTTL")
        return web.json_response(int(value) if value is not None else None)

    async def set_ttl(self, request: web.Request) -> web.Response:
        ttl = self._int_param(request, "messageTTL")
        if ttl < 0:
            raise _fail(400, "messageTTL must be >= 0")
        self.service.set_topic_policy(self._topic_name(request), "messageTTL", str(ttl))
        return web.Response(status=204)

    async def remove_ttl(self, request: web.Request) -> web.Response:
        self.service.set_topic_policy(self._topic_name(request), "messageTTL", None)
        return web.Response(status=204)
