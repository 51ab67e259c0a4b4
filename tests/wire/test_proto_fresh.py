"""The checked-in generated code must match its .proto (run scripts/gen_proto.py after editing one).

The descriptors are compared, not the generated text, so a newer protoc that words its
output differently does not fail the test; a changed field, number or default does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc

from magnetar.wire.proto import pulsar_api_pb2, pulsar_markers_pb2

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize(("proto", "module"), [("magnetar/wire/proto/pulsar_api.proto", pulsar_api_pb2),
                                               ("magnetar/wire/proto/pulsar_markers.proto", pulsar_markers_pb2)])
def test_generated_code_matches_proto(tmp_path, proto, module):
    out = tmp_path / "proto.desc"
    assert protoc.main(["protoc", f"-I{SRC}", f"--descriptor_set_out={out}", str(SRC / proto)]) == 0
    compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    _drop_json_names(compiled.message_type)  # the Python generator leaves them out
    checked_in = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
    assert compiled == checked_in, "generated code is stale: run `python scripts/gen_proto.py`"


def _drop_json_names(messages) -> None:
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _drop_json_names(message.nested_type)
