"""Re-record tests/wire/vectors/ from the installed official pulsar-client.

    .venv/bin/python tests/wire/record_vectors.py [--out DIR]

Run it after upgrading pulsar-client and review the diff: the vectors are the C++
client's own bytes, so a change there is a change in what our broker must accept.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wire_recorder import VECTORS_DIR, record, running_recorder, save_vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=VECTORS_DIR)
    args = parser.parse_args()
    with running_recorder() as recorder:
        recorded = record(recorder)
    save_vectors(recorded, args.out)
    for name, frames in recorded.items():
        print(f"{name}: {len(frames)} SEND frame(s)")


if __name__ == "__main__":
    main()
