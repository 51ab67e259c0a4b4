"""Schemas as the binary protocol carries them (`Schema` in CommandProducer, CommandSubscribe,
GET_SCHEMA and GET_OR_CREATE_SCHEMA), shared by the broker and magnetar.client."""

from __future__ import annotations

from magnetar.schemas.model import SchemaData, SchemaType
from magnetar.wire.proto import pulsar_api_pb2 as pb


def from_wire(schema: pb.Schema, user: str = "") -> SchemaData | None:
    """The schema a client sent; None for type None, which (as in Pulsar) registers nothing."""
    kind = SchemaType.from_wire(schema.type)
    if kind == SchemaType.NONE:
        return None
    properties = {pair.key: pair.value for pair in schema.properties}
    return SchemaData(kind, bytes(schema.schema_data), properties, user)


def to_wire(name: str, schema: SchemaData) -> pb.Schema:
    """`name` is the registry's id of the topic (`tenant/ns/topic`), as Pulsar names it."""
    return pb.Schema(name=name, schema_data=schema.data, type=schema.type.wire,  # type: ignore[arg-type]
                     properties=[pb.KeyValue(key=k, value=v) for k, v in sorted(schema.properties.items())])
