"""Exactly-once Spark sink against the plain sink: rows/s of batch writes of 100-byte rows on
local[2] (2 tasks), `.option("exactlyOnce", "true")` (each task's rows in a transaction,
committed by the job's commit) beside the default (at least once), in alternating rounds on
one broker with transactionCoordinatorEnabled. Prints one JSON object.

Both write in the Pulsar entry format, 1000 messages a batch (magnetar.client batches a
transaction's messages too); the difference is the transactions' cost. Every topic's stored count
is checked against the rows written (plus one commit marker per transaction). The machine's
load average is printed: figures compare only between equally idle runs.

Usage: python benchmarks/spark_exactly_once_bench.py [--rows 100000] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_write_bench import spark_rate, stored_counts
from standalone import Standalone

from magnetar.admin_client import AdminClient

KINDS = {"plain": {}, "exactly_once": {"exactlyOnce": "true"}}
TASKS = 2
"""spark_rate writes from 2 partitions: 2 tasks, 2 transactions a write."""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", help="where the broker's data goes (a temporary directory in it, removed at the end)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-eo-bench-", dir=args.dir) as root:
        run(args.rows, args.rounds, Path(root))


def run(rows: int, rounds: int, root: Path) -> None:
    broker = Standalone(root / "data", ["transactionCoordinatorEnabled=true"]).start()
    admin = AdminClient(broker.admin_url)
    loads = [round(os.getloadavg()[0], 2)]
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    try:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession  # noqa: PLC0415

        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
            .config("spark.ui.showConsoleProgress", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        for kind, options in KINDS.items():  # workers and JIT, outside the timing
            spark_rate(spark, broker.url, f"warm-up-{kind}", 5_000, "pulsar", **options)
        for i in range(rounds):
            order = list(KINDS) if i % 2 == 0 else list(reversed(KINDS))
            for kind in order:
                rates[kind].append(spark_rate(spark, broker.url, f"{kind}-{i}", rows, "pulsar", **KINDS[kind]))
            loads.append(round(os.getloadavg()[0], 2))
        spark.stop()
        counts = stored_counts(admin, tuple(f"plain-{i}" for i in range(rounds)), rows)
        # msgInCounter also counts each transaction's commit marker: one per task
        counts |= stored_counts(admin, tuple(f"exactly_once-{i}" for i in range(rounds)), rows + TASKS)
    finally:
        broker.stop()
    plain, exactly_once = statistics.median(rates["plain"]), statistics.median(rates["exactly_once"])
    print(json.dumps({
        "rows": rows,
        "row_bytes": 100,
        "rounds": rounds,
        "plain_rows_per_s": [round(r) for r in rates["plain"]],
        "exactly_once_rows_per_s": [round(r) for r in rates["exactly_once"]],
        "median_plain_rows_per_s": round(plain),
        "median_exactly_once_rows_per_s": round(exactly_once),
        "exactly_once_vs_plain": round(exactly_once / plain, 2),
        "stored": counts,
        "load_average": loads,
    }, indent=2))


if __name__ == "__main__":
    main()
