"""Spark sink benchmark: rows/s writing 100-byte rows on local[2] through `service.url`, as
Pulsar batches and as Arrow entries, beside one official-client producer process in the
same run. Prints one JSON object.

Spark generates the rows (`spark.range`, a 100-byte binary `value`) in 2 partitions, so the
timing is the sink's: Spark to Arrow batches, the Python worker, magnetar.client producers,
the broker storing. The official client's producer runs in its own process (batching on,
which the Python client leaves off by default, at its defaults of 1000 messages / 128 KiB /
10 ms; `send_async` with a callback counting receipts, `block_if_queue_full=True`, as
benchmarks/_broker_process.produce sends).
Every topic's stored message count is checked against the rows sent. The machine's load
average is printed: figures compare only between equally idle runs.

Usage: python benchmarks/spark_write_bench.py [--rows 10000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker_process import official_client, produce
from standalone import Standalone

from magnetar.admin_client import AdminClient


def _official_child(url: str, topic: str, rows: int, results: multiprocessing.Queue) -> None:
    client = official_client(url)
    producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=True)
    result = produce(producer, rows)
    client.close()
    results.put(result)


def official_rate(url: str, topic: str, rows: int) -> float:
    """One official producer in a process of its own, as an application would run it."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_official_child, args=(url, topic, rows, results))
    child.start()
    result = results.get(timeout=3600)
    child.join()
    if result.sent != rows:
        raise RuntimeError(f"the official producer had {result.sent} of {rows} receipts ({result.failed} failed)")
    return rows / result.seconds


def spark_rate(spark: object, url: str, topic: str, rows: int, entry_format: str, **options: str) -> float:
    """Rows/s of one batch write of `rows` 100-byte rows; `options`: more sink options."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    df = spark.range(rows, numPartitions=2).select(  # type: ignore[attr-defined]
        F.concat(F.lit("x" * 90), F.lpad(F.col("id").cast("string"), 10, "0")).cast("binary").alias("value"))
    start = time.perf_counter()
    df.write.format("magnetar").option("service.url", url).option("topic", topic) \
        .option("entryFormat", entry_format).options(**options).mode("append").save()
    return rows / (time.perf_counter() - start)


def stored(admin: AdminClient, topic: str) -> int:
    return int(admin.stats(f"persistent://public/default/{topic}")["msgInCounter"])


def stored_counts(admin: AdminClient, topics: tuple[str, ...], rows: int) -> dict[str, int]:
    """Each topic's stored message count, checked against the rows sent to it."""
    counts = {topic: stored(admin, topic) for topic in topics}
    if any(count != rows for count in counts.values()):
        raise RuntimeError(f"stored counts {counts} differ from {rows} rows")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dir", help="where the broker's data goes (a temporary directory in it, removed at the end)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-write-bench-", dir=args.dir) as root:
        run(args.rows, Path(root))


def run(rows: int, root: Path) -> None:
    """Three topics of `rows` rows each (gigabytes at the default size) under `root`,
    which main() removes afterwards."""
    broker = Standalone(root / "data").start()
    admin = AdminClient(broker.admin_url)
    loads = {"start": round(os.getloadavg()[0], 2)}
    try:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession  # noqa: PLC0415

        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
            .config("spark.ui.showConsoleProgress", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        spark_rate(spark, broker.url, "warm-up", 10_000, "pulsar")  # workers and JIT, outside the timing
        pulsar_batches = spark_rate(spark, broker.url, "spark-pulsar", rows, "pulsar")
        loads["after_pulsar_batches"] = round(os.getloadavg()[0], 2)
        arrow_entries = spark_rate(spark, broker.url, "spark-arrow", rows, "arrow")
        loads["after_arrow_entries"] = round(os.getloadavg()[0], 2)
        spark.stop()
        official = official_rate(broker.url, "official", rows)
        loads["after_official"] = round(os.getloadavg()[0], 2)
        counts = stored_counts(admin, ("spark-pulsar", "spark-arrow", "official"), rows)
    finally:
        broker.stop()
    print(json.dumps({
        "rows": rows,
        "row_bytes": 100,
        "spark_local2_pulsar_batches_rows_per_s": round(pulsar_batches),
        "spark_local2_arrow_entries_rows_per_s": round(arrow_entries),
        "official_producer_process_rows_per_s": round(official),
        "pulsar_batches_vs_official": round(pulsar_batches / official, 2),
        "arrow_entries_vs_official": round(arrow_entries / official, 2),
        "arrow_vs_pulsar_batches": round(arrow_entries / pulsar_batches, 2),
        "stored": counts,
        "load_average": loads,
    }, indent=2))


if __name__ == "__main__":
    main()
