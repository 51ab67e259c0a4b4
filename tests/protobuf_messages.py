"""Random protobuf message classes, built at run time from generated descriptors: nested
messages, repeated fields and an imported well-known type, so that PROTOBUF_NATIVE
definitions carry more than one file."""

from __future__ import annotations

import random
import uuid
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
from google.protobuf.message import Message

F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    F.TYPE_INT64: lambda rng: rng.randint(-2**63, 2**63 - 1),
    F.TYPE_STRING: lambda rng: rng.choice(["", "é", "x"]),
    F.TYPE_BYTES: lambda rng: rng.randbytes(rng.randint(0, 8)),
    F.TYPE_DOUBLE: lambda rng: rng.random(),
    F.TYPE_BOOL: lambda rng: rng.random() < 0.5,
}
_TIMESTAMP = ".google.protobuf.Timestamp"


def message_class(rng: random.Random) -> type[Message]:
    """A class `Root` with 1-6 random fields, in a package no other class has."""
    package = f"p{uuid.uuid4().hex[:12]}"
    file = descriptor_pb2.FileDescriptorProto(name=f"{package}/root.proto", package=package, syntax="proto3")
    root = file.message_type.add(name="Root")
    root.nested_type.add(name="Inner").field.add(name="x", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    for number in range(1, rng.randint(2, 7)):
        kind = rng.choice([*_SCALARS, "inner", "timestamp"])
        field = root.field.add(name=f"f{number}", number=number,
                               label=F.LABEL_REPEATED if rng.random() < 0.3 else F.LABEL_OPTIONAL)
        if kind == "inner":
            field.type, field.type_name = F.TYPE_MESSAGE, f".{package}.Root.Inner"
        elif kind == "timestamp":
            field.type, field.type_name = F.TYPE_MESSAGE, _TIMESTAMP
            if "google/protobuf/timestamp.proto" not in file.dependency:
                file.dependency.append("google/protobuf/timestamp.proto")
        else:
            field.type = kind
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(timestamp_pb2.DESCRIPTOR.serialized_pb))
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Root"))


def random_value(cls: type[Message], rng: random.Random) -> Message:
    value = cls()
    for field in cls.DESCRIPTOR.fields:
        count = rng.randint(0, 3) if field.is_repeated else 1
        for _ in range(count):
            _fill(value, field, rng, field.is_repeated)
    return value


def _fill(value: Message, field: Any, rng: random.Random, repeated: bool) -> None:
    if field.type != F.TYPE_MESSAGE:
        item = _SCALARS[field.type](rng)
        if repeated:
            getattr(value, field.name).append(item)
        else:
            setattr(value, field.name, item)
        return
    target = getattr(value, field.name).add() if repeated else getattr(value, field.name)
    if field.message_type.full_name == "google.protobuf.Timestamp":
        target.seconds, target.nanos = rng.randint(0, 2**40), rng.randint(0, 999_999_999)
    else:
        target.x = rng.randint(-99, 99)
