"""PROTOBUF_NATIVE definitions built as the official clients build them, from real descriptors."""

from __future__ import annotations

import base64
import json

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FileDescriptor


def _collect(file: FileDescriptor, seen: set[str], out: descriptor_pb2.FileDescriptorSet) -> None:
    if file.name in seen:
        return
    for dependency in file.dependencies:
        _collect(dependency, seen, out)
    seen.add(file.name)
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    out.file.append(proto)


def definition(message: Descriptor) -> bytes:
    files = descriptor_pb2.FileDescriptorSet()
    _collect(message.file, set(), files)
    return json.dumps({
        "fileDescriptorSet": base64.b64encode(files.SerializeToString()).decode(),
        "rootMessageTypeName": message.full_name,
        "rootFileDescriptorName": message.file.name,
    }).encode()
