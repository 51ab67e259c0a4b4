"""PROTOBUF_NATIVE definitions as the official client builds them, from real descriptors."""

from __future__ import annotations

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor
from pulsar.schema import ProtobufNativeSchema


def definition(message: Descriptor) -> bytes:
    schema = ProtobufNativeSchema(message_factory.GetMessageClass(message))
    return schema.schema_info().schema().encode()
