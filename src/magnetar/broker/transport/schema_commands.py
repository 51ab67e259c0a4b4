"""The schema commands: GET_SCHEMA (a version, the latest when none is named) and
GET_OR_CREATE_SCHEMA (a producer-to-be's schema registered as CommandProducer would), each
authorized by its operation. A refusal raises BrokerServiceError, which the connection answers in
the command's own error response type.

Functions of the connection they came on (a CommandHost), in its table of handlers, like
lookup_commands; the producer's and subscriber's registrations are in the connection and
consumer_commands, through the broker's SchemaRegistryService.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.auth.operations import COMMANDS
from magnetar.broker.errors import BrokerServiceError
from magnetar.schemas import SchemaData, SchemaError, schema_id, version_bytes
from magnetar.schemas.protocol import from_wire, to_wire
from magnetar.wire import commands
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.transport.seams import CommandHost

T = pb.BaseCommand


def handle_get_schema(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.getSchema
    cnx.authorize(COMMANDS[T.GET_SCHEMA], req.topic)
    topic = cnx.service.parse_topic(req.topic)
    version = req.schema_version if req.HasField("schema_version") and req.schema_version else None
    found = cnx.service.schemas.get(topic, version)
    schema = to_wire(schema_id(topic), found.schema)
    cnx.send(commands.get_schema_response(req.request_id, schema, version_bytes(found.version)))


def handle_get_or_create_schema(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.getOrCreateSchema
    cnx.authorize(COMMANDS[T.GET_OR_CREATE_SCHEMA], req.topic)
    topic = cnx.service.parse_topic(req.topic)
    if not cnx.service.topic_exists(topic):
        raise BrokerServiceError(pb.TopicNotFound, f"Topic not found {req.topic}")
    version = cnx.service.schemas.add_schema(topic, schema_of(req.schema, cnx.role))
    cnx.send(commands.get_or_create_schema_response(req.request_id, version))


def schema_of(schema: pb.Schema, role: str | None) -> SchemaData | None:
    """A client's schema for the registry; a type number no schema has is IncompatibleSchema."""
    try:
        return from_wire(schema, role or "")
    except SchemaError as exc:
        raise BrokerServiceError(pb.IncompatibleSchema, str(exc)) from None
