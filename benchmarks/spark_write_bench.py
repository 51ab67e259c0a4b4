"""Spark sink benchmark: rows/s writing 100-byte rows on local[2] through `service.url`, as
Pulsar batches and as Arrow entries, beside one official-client producer process in the
same run. Prints one JSON object.

Spark generates the rows (`spark.range`, a 100-byte binary `value`) in 2 partitions, so the
timing is the sink's: Spark to Arrow batches, the Python worker, magnetar.client producers,
the broker storing. The official client's producer runs in its own process (batching at its
defaults, `send_async` with a callback counting receipts, `block_if_queue_full=True`).
Every topic's stored message count is checked against the rows sent. The machine's load
average is printed: figures compare only between equally idle runs.

Usage: python benchmarks/spark_write_bench.py [--rows 10000000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

from magnetar.admin.client import AdminClient

OFFICIAL_PRODUCER = """
import sys, threading, time
import pulsar
url, topic, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
producer = client.create_producer(topic, block_if_queue_full=True)
done = threading.Event()
acked = [0]
def callback(result, message_id):
    acked[0] += 1
    if acked[0] == rows:
        done.set()
start = time.perf_counter()
for i in range(rows):
    producer.send_async(b"x" * 90 + b"%010d" % i, callback)
producer.flush()
done.wait(600)
print(rows / (time.perf_counter() - start), acked[0])
client.close()
"""


def official_rate(url: str, topic: str, rows: int) -> float:
    out = subprocess.run([sys.executable, "-c", OFFICIAL_PRODUCER, url, topic, str(rows)],
                         capture_output=True, text=True, check=True, timeout=3600)
    rate, acked = out.stdout.split()
    if int(acked) != rows:
        raise RuntimeError(f"the official producer had {acked} of {rows} receipts")
    return float(rate)


def spark_rate(spark: object, url: str, topic: str, rows: int, entry_format: str) -> float:
    from pyspark.sql import functions as F  # noqa: PLC0415

    df = spark.range(rows, numPartitions=2).select(  # type: ignore[attr-defined]
        F.concat(F.lit("x" * 90), F.lpad(F.col("id").cast("string"), 10, "0")).cast("binary").alias("value"))
    start = time.perf_counter()
    df.write.format("magnetar").option("service.url", url).option("topic", topic) \
        .option("entryFormat", entry_format).mode("append").save()
    return rows / (time.perf_counter() - start)


def stored(admin: AdminClient, topic: str) -> int:
    return int(admin.stats(f"persistent://public/default/{topic}")["msgInCounter"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dir")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="spark-write-bench-"))
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
        pulsar_batches = spark_rate(spark, broker.url, "spark-pulsar", args.rows, "pulsar")
        loads["after_pulsar_batches"] = round(os.getloadavg()[0], 2)
        arrow_entries = spark_rate(spark, broker.url, "spark-arrow", args.rows, "arrow")
        loads["after_arrow_entries"] = round(os.getloadavg()[0], 2)
        spark.stop()
        official = official_rate(broker.url, "official", args.rows)
        loads["after_official"] = round(os.getloadavg()[0], 2)
        counts = {topic: stored(admin, topic) for topic in ("spark-pulsar", "spark-arrow", "official")}
    finally:
        broker.stop()
    if any(count != args.rows for count in counts.values()):
        raise RuntimeError(f"stored counts {counts} differ from {args.rows} rows")
    print(json.dumps({
        "rows": args.rows,
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
