"""PROTOBUF_NATIVE: values are generated protobuf messages in their own binary encoding, and
the definition carries the message's descriptors so that any reader (Java's DynamicMessage,
the broker's compatibility check, another language) can decode them without the class.

The definition is the official client's (`pulsar.schema.ProtobufNativeSchema`) byte for
byte, so both register one version: the JSON (one-space indent) of `fileDescriptorSet` (the
base64 of a FileDescriptorSet holding the message's file and every file it imports,
dependencies first, each once), `rootMessageTypeName` (the message's full name) and
`rootFileDescriptorName` (its file's name), as Java's ProtobufNativeSchemaUtils lays it out.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtobufMessage

from magnetar.client.schema.schemas import Schema, definition_bytes
from magnetar.schemas.model import SchemaType


class ProtobufNativeSchema(Schema):
    """Values of one generated protobuf message class."""

    def __init__(self, record_cls: type[ProtobufMessage]) -> None:
        if not (isinstance(record_cls, type) and issubclass(record_cls, ProtobufMessage)):
            raise TypeError(f"ProtobufNativeSchema takes a generated protobuf message class, not {record_cls!r}")
        super().__init__(record_cls, SchemaType.PROTOBUF_NATIVE, definition_bytes(_definition(record_cls.DESCRIPTOR)),
                         SchemaType.PROTOBUF_NATIVE.name)

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        return obj.SerializeToString()

    def decode(self, data: bytes) -> Any:
        try:
            return self._record_cls.FromString(data)
        except DecodeError as exc:
            raise ValueError(f"{self} cannot decode {len(data)} bytes: {exc}") from None

    def __str__(self) -> str:
        return f"ProtobufNativeSchema({self._record_cls.__name__})"


def _definition(message: Descriptor) -> dict[str, str]:
    files = descriptor_pb2.FileDescriptorSet()
    _add_file(message.file, set(), files)
    return {
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode("ascii"),
        "rootMessageTypeName": message.full_name,
        "rootFileDescriptorName": message.file.name,
    }


def _add_file(file: FileDescriptor, added: set[str], files: descriptor_pb2.FileDescriptorSet) -> None:
    """`file` after the files it imports (depth first), each file once."""
    if file.name in added:
        return
    for dependency in file.dependencies:
        _add_file(dependency, added, files)
    added.add(file.name)
    file.CopyToProto(files.file.add())
