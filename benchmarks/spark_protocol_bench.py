"""Spark over `service.url` vs over `path`: rows/s of the same topic in one run, and what
the driver's searches through the broker cost. Prints one JSON object.

The topic is written straight into storage as spark_bench.py writes it (batches of 100-byte
messages with the PIP-70 prefix); a broker exposing the prefix serves it.

Usage: python benchmarks/spark_protocol_bench.py [--messages 2000000] [--batch 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from spark_bench import INTERCEPTORS, TOPIC, write_topic
from standalone import Standalone

from magnetar.spark.offsets import TopicPartition
from magnetar.spark.protocol_reader import ProtocolTopics
from magnetar.spark.storage_reader import Bounds

EXPOSING = "exposingBrokerEntryMetadataToClientEnabled=true"


def timed_counts(df: object, runs: int) -> list[float]:
    df.limit(1).collect()  # start the Python workers outside the timing
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        rows = df.count()
        seconds.append(time.perf_counter() - start)
    return rows, seconds


def driver_search(url: str, last_percent_time: int, middle_index: int) -> dict[str, float]:
    """What planning costs over the protocol: probes and time for a time and an index bound."""
    tp = TopicPartition(f"persistent://public/default/{TOPIC}", -1)
    out = {}
    with ProtocolTopics(url) as topics:
        for name, bounds in (("time", Bounds(time_min=last_percent_time)), ("index", Bounds(index_min=middle_index))):
            before = topics.probes
            start = time.perf_counter()
            topics.plan(tp, bounds, 0, True)
            out[f"plan_by_{name}_ms"] = round((time.perf_counter() - start) * 1000, 1)
            out[f"plan_by_{name}_entries_probed"] = topics.probes - before
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="spark-protocol-bench-")) / "data"
    entries, last_percent_time = write_topic(data_dir, args.messages, args.batch)
    broker = Standalone(data_dir, [INTERCEPTORS, EXPOSING]).start()
    try:
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession  # noqa: PLC0415

        import magnetar.spark  # noqa: PLC0415

        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        magnetar.spark.register(spark)
        reader = spark.read.format("magnetar").option("topic", TOPIC)
        results = {}
        for via, df in (
            ("path", reader.load(str(data_dir))),
            ("service_url", reader.option("service.url", broker.url).load()),
        ):
            rows, seconds = timed_counts(df, args.runs)
            results[f"{via}_rows"] = rows
            results[f"{via}_seconds"] = [round(s, 2) for s in seconds]
            results[f"{via}_rows_per_s"] = round(rows / statistics.median(seconds))
        start = time.perf_counter()
        since = f"broker_time >= timestamp_millis({last_percent_time})"
        recent = reader.option("service.url", broker.url).load().where(since).count()
        results["service_url_last_1pct_rows"] = recent
        results["service_url_last_1pct_seconds"] = round(time.perf_counter() - start, 2)
        spark.stop()
        results.update(driver_search(broker.url, last_percent_time, args.messages // 2))
    finally:
        broker.stop()
    results["service_url_vs_path"] = round(results["service_url_rows_per_s"] / results["path_rows_per_s"], 2)
    results.update(messages=args.messages, entries=entries, load_average_1m=round(os.getloadavg()[0], 2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
