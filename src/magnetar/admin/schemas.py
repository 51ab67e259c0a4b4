"""`/admin/v2/schemas/{tenant}/{namespace}/{topic}/...`: a topic's schema registry, as
Pulsar's SchemasResource serves it (pulsar-admin schemas get|upload|delete, the Java and
Go admin clients).

- `GET schema`, `GET schema/{version}`: `{"version", "type", "timestamp", "data", "properties"}`
  (404 when there is none, or it was deleted);
- `GET schemas`: every live version, `{"getSchemaResponses": [...]}`;
- `POST schema`: register a `{"type", "schema", "properties"}` payload under the topic's
  strategy: `{"version": {"version": n}}`, 409 incompatible, 422 not a valid definition;
- `DELETE schema`: a tombstone (`?force=true`: every version forgotten), `{"version": n}`;
- `POST compatibility`: would it be accepted, `{"isCompatibility", "schemaCompatibilityStrategy"}`
  (an incompatible schema answers false where Pulsar answers an error);
- `POST version`: the version equal to the payload, `{"version": n}` (-1 for none).

A KEY_VALUE payload's `schema` (and a KEY_VALUE answer's `data`) is the JSON object
`{"key": ..., "value": ...}` of the two sides' definitions, as Pulsar's admin API shows it.
"""

from __future__ import annotations

import json
from typing import Any

from magnetar import web
from magnetar.admin.responses import bool_param, fail, json_body, long_int
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.schema_registry import settled
from magnetar.broker.service.broker_service import BrokerService
from magnetar.schemas import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    SchemaData,
    SchemaNotFoundError,
    SchemaType,
    SchemaVersion,
    schema_id,
)
from magnetar.schemas.definitions import join_key_value, key_value_parts
from magnetar.web import PRINCIPAL
from magnetar.wire.topic_name import TopicName

SCHEMAS = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
NO_VERSION = -1


class SchemasApi:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.registry = service.schemas.registry

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(SCHEMAS + "/schema", self.get_latest),
            web.get(SCHEMAS + "/schema/{version}", self.get_version),
            web.get(SCHEMAS + "/schemas", self.get_all),
            web.post(SCHEMAS + "/schema", self.post),
            web.delete(SCHEMAS + "/schema", self.delete),
            web.post(SCHEMAS + "/compatibility", self.compatibility),
            web.post(SCHEMAS + "/version", self.version),
        ]

    def _topic(self, request: web.Request) -> TopicName:
        """The persistent topic the path names, in a namespace that exists."""
        info = request.match_info
        try:
            topic = self.service.parse_topic(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
        except BrokerServiceError as exc:
            raise fail(412, exc.message) from exc
        self.service.check_namespace(topic)
        return topic

    async def get_latest(self, request: web.Request) -> web.Response:
        return self._found(self._topic(request), None)

    async def get_version(self, request: web.Request) -> web.Response:
        return self._found(self._topic(request), long_int("version", request.match_info["version"]))

    def _found(self, topic: TopicName, version: int | None) -> web.Response:
        try:
            found = self.registry.get(schema_id(topic), version)
        except SchemaNotFoundError as exc:
            raise fail(404, f"Schema not found: {exc}") from None
        return web.json_response(_response(found))

    async def get_all(self, request: web.Request) -> web.Response:
        live = self.registry.live(schema_id(self._topic(request)))
        return web.json_response({"getSchemaResponses": [_response(v) for v in live]})

    async def post(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        schema = await _payload(request)
        try:
            version = await settled(lambda: self.service.schemas.version_of(topic, schema, uploaded=True))
        except InvalidSchemaError as exc:
            raise fail(422, str(exc)) from None
        except IncompatibleSchemaError as exc:
            raise fail(409, str(exc)) from None
        return web.json_response({"version": {"version": version}})

    async def delete(self, request: web.Request) -> web.Response:
        sid = schema_id(self._topic(request))
        history = self.registry.history(sid)
        if bool_param(request, "force"):
            self.registry.delete_all(sid)
            return web.json_response({"version": history[-1].version if history else NO_VERSION})
        return web.json_response({"version": self.registry.delete(sid, _user(request))})

    async def compatibility(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        schema = await _payload(request)
        strategy = self.service.schemas.strategy(topic)
        try:
            await settled(lambda: self.service.schemas.check_compatible(topic, schema))
            compatible = True
        except InvalidSchemaError as exc:
            raise fail(422, str(exc)) from None
        except IncompatibleSchemaError:
            compatible = False
        return web.json_response({"isCompatibility": compatible, "schemaCompatibilityStrategy": strategy.value})

    async def version(self, request: web.Request) -> web.Response:
        topic = self._topic(request)
        schema = await _payload(request)
        found = await settled(lambda: self.service.schemas.find_version(topic, schema))
        return web.json_response({"version": NO_VERSION if found is None else found})


async def _payload(request: web.Request) -> SchemaData:
    """Pulsar's PostSchemaPayload `{"type": "AVRO", "schema": "<definition>", "properties": {}}`."""
    body = await json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise fail(400, 'the body must be a schema payload: {"type": "AVRO", "schema": "...", "properties": {}}')
    definition = body.get("schema") or ""
    properties = body.get("properties") or {}
    if not isinstance(definition, str):
        raise fail(400, "schema must be the definition as a string")
    if not isinstance(properties, dict) or not all(isinstance(v, str) for v in properties.values()):
        raise fail(400, "properties must be an object of strings")
    try:
        kind = SchemaType.parse(body["type"])
        if kind == SchemaType.KEY_VALUE:
            return _key_value_payload(definition, properties)
    except InvalidSchemaError as exc:
        raise fail(422, str(exc)) from None
    return SchemaData(kind, definition.encode(), properties, _user(request))


def _user(request: web.Request) -> str:
    """Who registers or deletes (the authenticated role; empty when authentication is off)."""
    principal = request.get(PRINCIPAL)
    return principal.role if principal is not None else ""


def _key_value_payload(definition: str, properties: dict[str, str]) -> SchemaData:
    try:
        sides = json.loads(definition)
    except (ValueError, RecursionError):
        sides = None
    if not isinstance(sides, dict) or not {"key", "value"} <= sides.keys():
        raise InvalidSchemaError('a KEY_VALUE schema is the JSON object {"key": ..., "value": ...} of two definitions')
    stub = SchemaData(SchemaType.KEY_VALUE, b"\x00\x00\x00\x00\x00\x00\x00\x00", properties)
    parts = key_value_parts(stub)
    key = SchemaData(parts.key.type, _side_bytes(sides["key"]), parts.key.properties)
    value = SchemaData(parts.value.type, _side_bytes(sides["value"]), parts.value.properties)
    joined = join_key_value(key, value, key_name=properties.get("key.schema.name", ""),
                            value_name=properties.get("value.schema.name", ""), encoding=parts.encoding)
    return SchemaData(SchemaType.KEY_VALUE, joined.data, {**properties, **joined.properties})


def _side_bytes(side: Any) -> bytes:
    if side is None:
        return b""
    return (side if isinstance(side, str) else json.dumps(side)).encode()


def _response(found: SchemaVersion) -> dict[str, Any]:
    schema = found.schema
    return {"version": found.version, "type": schema.type.name, "timestamp": schema.timestamp,
            "data": _data(schema), "properties": dict(schema.properties)}


def _data(schema: SchemaData) -> str:
    if schema.type != SchemaType.KEY_VALUE:
        return schema.data.decode("utf-8", "replace")
    parts = key_value_parts(schema)
    return json.dumps({"key": _side_json(parts.key.data), "value": _side_json(parts.value.data)})


def _side_json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return data.decode("utf-8", "replace")
