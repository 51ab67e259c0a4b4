"""Append-to-durable latency of storage alone while a subscription acknowledges (issue 45).

    .venv/bin/python benchmarks/commit_stall_bench.py [--rate 10000] [--seconds 5] [--rounds 2]
    .venv/bin/python benchmarks/commit_stall_bench.py --tree before=/tmp/x/src --tree after=src

No broker, no client, no event loop: one managed ledger in a temp dir, 100-byte entries
appended open loop at `--rate` (each counted from its scheduled time), and every durable
entry acknowledged on a durable cursor, as a consumer keeping up does, so its cursor is
dirty and flushed (a metadata commit, an fsync) every 100 ms. What is left is what storage's
threads do to an append's way to durable: the group-commit wait, the write and fsync, and
whatever else the sync thread does in between. `--tree LABEL=SRC` runs each source tree in
a process of its own (PYTHONPATH=SRC), alternating their order between rounds.

Prints ONE JSON object: per tree and round p50/p99/p99.9/max (ms); `commits` (group writes,
one fsync each) and `entries_per_commit`, which decide what a commit rule costs a broker (each
commit is one hand-over to the event loop and one receipt write per connection);
`cpu_us_per_entry` of the process; and the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def measure(rate: int, seconds: float, work: Path) -> dict[str, float]:
    """In this process: the latencies of one run, in ms."""
    from magnetar.storage import ManagedLedgerFactory  # noqa: PLC0415 (the tree under test)
    from magnetar.storage.ledger import Ledger  # noqa: PLC0415

    commits = [0]
    write_group = Ledger.append

    def counted(self, entries, *, sync):
        commits[0] += 1
        return write_group(self, entries, sync=sync)

    Ledger.append = counted
    latencies: list[float] = []
    done = threading.Event()
    total = int(rate * seconds)
    with ManagedLedgerFactory(work) as factory:
        ml = factory.open("bench")
        cursor = ml.open_cursor("sub", "earliest")

        def durable(scheduled: float, position: object, error: BaseException | None) -> None:
            latencies.append(time.monotonic() - scheduled)
            if error is None:
                cursor.delete([position])  # type: ignore[list-item]
            if len(latencies) == total:
                done.set()

        start = time.monotonic() + 0.1
        cpu = time.process_time()
        for i in range(total):
            scheduled = start + i / rate
            if (ahead := scheduled - time.monotonic()) > 0:  # never early: latency counts from here
                time.sleep(ahead)
            ml.append(b"x" * 100, lambda position, error, at=scheduled: durable(at, position, error))
        done.wait(60)
        cpu = time.process_time() - cpu
    latencies.sort()
    count = len(latencies)

    def at(q: float) -> float:
        return round(latencies[min(count - 1, int(q * count))] * 1000, 3)

    return {"count": count, "p50": at(0.5), "p99": at(0.99), "p99.9": at(0.999), "max": at(1.0),
            "commits": commits[0], "entries_per_commit": round(count / max(1, commits[0]), 1),
            "cpu_us_per_entry": round(cpu / max(1, count) * 1e6, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", action="append", metavar="LABEL=SRC",
                        help="a source tree to run (repeatable; default: this environment's)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.rate, args.seconds, Path(args.child))))
        return
    trees = dict(item.partition("=")[::2] for item in args.tree or ["this="])
    out: dict[str, object] = {"rate": args.rate, "seconds": args.seconds, "loadavg_start": os.getloadavg()}
    runs = []
    for round_no in range(args.rounds):
        for label in list(trees) if round_no % 2 == 0 else list(trees)[::-1]:
            env = dict(os.environ)
            if trees[label]:
                env["PYTHONPATH"] = str(Path(trees[label]).resolve())
            with tempfile.TemporaryDirectory(prefix="commit-stall-") as tmp:
                result = subprocess.run([sys.executable, __file__, "--rate", str(args.rate), "--seconds",
                                         str(args.seconds), "--child", tmp], env=env, check=True,
                                        capture_output=True, text=True)
            runs.append({"tree": label, "round": round_no + 1, **json.loads(result.stdout)})
    out["runs"] = runs
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
