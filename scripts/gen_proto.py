"""Regenerate the checked-in protobuf code from src/magnetar/wire/proto/pulsar_api.proto.

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
PROTO = "magnetar/wire/proto/pulsar_api.proto"


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(
        ["protoc", f"-I{SRC}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", str(SRC / PROTO)]
    )
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
