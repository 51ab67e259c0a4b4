"""Regenerate the checked-in protobuf code from src/magnetar/wire/proto/*.proto (Pulsar's
commands and metadata, and the payloads of replicated subscriptions' markers).

The generated module is committed so that installing magnetar needs no protoc;
tests/wire/test_proto_fresh.py fails when it no longer matches the .proto.
Usage: python scripts/gen_proto.py [OUT_DIR]  (default: the source tree)
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PROTOS = ("magnetar/wire/proto/pulsar_api.proto", "magnetar/wire/proto/pulsar_markers.proto")


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        rc = protoc.main(
            ["protoc", f"-I{SRC}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", str(SRC / proto)]
        )
        if rc != 0:
            raise SystemExit(f"protoc failed on {proto} with exit code {rc}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
