"""The group commit alone at a fixed rate: how long an append waits for durable, and at what cost.

    .venv/bin/python benchmarks/group_commit_bench.py --magnetar before=/tmp/main/src --magnetar after=src

Open loop, as latency_bench.py but without a client or a broker: one thread appends
100-byte entries to one managed ledger (the default configuration: fsync on,
`journalMaxGroupWaitMSec` 1 ms) at `--rate` per second, each at its scheduled time, and
latency runs from that time to the append's durable callback. Each source tree runs in a
process of its own (PYTHONPATH=SRC), trees alternating round by round, so two versions of
the commit rule meet the same disk within seconds of each other.

Per cell: latency p50/p99/p99.9/max (ms); `commits` (writes + fsyncs) and entries per
commit, which decide the broker's cost per message (each commit is one hand-over to the
event loop, one receipt write per connection); the process's CPU µs per entry; and how late
the appending thread itself ran. Prints one JSON object with the load average at start and end.
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

ENTRY = b"x" * 100


def child(rate: int, seconds: float, warmup: float) -> dict:
    from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory  # noqa: PLC0415
    from magnetar.storage import ledger as ledger_module  # noqa: PLC0415

    commits = [0]
    original = ledger_module.Ledger.append

    def counting_append(self, entries, *, sync):
        commits[0] += 1
        return original(self, entries, sync=sync)

    ledger_module.Ledger.append = counting_append
    count = int(rate * (seconds + warmup))
    skip = int(rate * warmup)
    latencies: list[float] = []
    done = threading.Event()

    def durable(due: int, index: int):
        def callback(_position, error) -> None:
            assert error is None, error
            if index >= skip:
                latencies.append((time.monotonic_ns() - due) / 1e6)
            if index == count - 1:
                done.set()
        return callback

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as work:
        config = ManagedLedgerConfig(max_entries_per_ledger=count + 1)
        with ManagedLedgerFactory(Path(work), config) as factory:
            ml = factory.open("persistent://public/default/group-commit-bench")
            interval = 1e9 / rate
            start = time.monotonic_ns() + 5_000_000
            late = 0
            cpu_at_skip = commits_at_skip = 0.0
            for i in range(count):
                due = start + int(i * interval)
                ahead = due - time.monotonic_ns()
                if ahead > 100_000:
                    time.sleep((ahead - 50_000) / 1e9)
                if i == skip:
                    cpu_at_skip, commits_at_skip = time.process_time(), commits[0]
                ml.append(ENTRY, durable(due, i))
                late = max(late, time.monotonic_ns() - due)
            done.wait(60)
            cpu = time.process_time() - cpu_at_skip
            measured_commits = commits[0] - commits_at_skip
    ordered = sorted(latencies)
    n = len(ordered)
    return {"entries": n, **{name: round(ordered[min(n - 1, int(q * n))], 3)
                            for name, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0))},
            "commits": measured_commits, "entries_per_commit": round(n / max(1, measured_commits), 1),
            "cpu_us_per_entry": round(cpu / n * 1e6, 2), "appender_late_ms_max": round(late / 1e6, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--magnetar", action="append", metavar="LABEL=SRC",
                        help="a source tree to run (repeatable; default: this checkout's src)")
    parser.add_argument("--rate", type=int, action="append", help="entries/s (repeatable; default 1000 and 10000)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rates = args.rate or [1000, 10000]
    if args.child:
        print(json.dumps(child(rates[0], args.seconds, args.warmup)))
        return
    here = Path(__file__).resolve().parent
    trees = dict(spec.split("=", 1) for spec in args.magnetar or [f"this={here.parent / 'src'}"])
    cells = []
    load_start = os.getloadavg()
    for round_ in range(args.rounds):
        labels = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for rate in rates:
            for label in labels:
                env = {**os.environ, "PYTHONPATH": str(Path(trees[label]).resolve())}
                out = subprocess.run(
                    [sys.executable, __file__, "--child", "--rate", str(rate), "--seconds", str(args.seconds),
                     "--warmup", str(args.warmup)], env=env, capture_output=True, text=True, check=True, timeout=300)
                cells.append({"round": round_ + 1, "tree": label, "rate": rate,
                              **json.loads(out.stdout.strip().splitlines()[-1])})
    print(json.dumps({"trees": trees, "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
                      "cells": cells}, indent=1))


if __name__ == "__main__":
    main()
