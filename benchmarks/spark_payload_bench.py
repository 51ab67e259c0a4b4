"""Spark source rows/s on local[2]: Arrow IPC entries (PIP-96) against Pulsar batches of the
same messages, side by side in one session. Prints one JSON object.

Both topics are written straight into one data directory: --messages 100-byte messages,
--batch per entry, as a batching producer and `producer.send_arrow` write them. Each
query sums the value lengths (so every value is read, not only counted) --runs times;
the median is reported. `decode_one_core_rows_per_s` is the same entries turned into
Arrow batches in this process, without Spark.

Usage: python benchmarks/spark_payload_bench.py [--messages 5000000] [--batch 1000]
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

import pyarrow as pa

from magnetar.formats.arrow_ipc import encode_arrow_batches
from magnetar.spark.rows import rows_of_entries
from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import FORMAT_PROPERTY, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

VALUE = b"v" * 100


def pulsar_payload(batch: int) -> tuple[pb.MessageMetadata, bytes]:
    singles = [(pb.SingleMessageMetadata(sequence_id=i), VALUE) for i in range(batch)]
    return pb.MessageMetadata(num_messages_in_batch=batch), encode_batch(singles)


def arrow_payload(batch: int) -> tuple[pb.MessageMetadata, bytes]:
    ((payload, _),) = encode_arrow_batches(pa.table({"value": pa.array([VALUE] * batch, pa.binary())}))
    metadata = pb.MessageMetadata(num_messages_in_batch=batch)
    metadata.properties.add(key=FORMAT_PROPERTY, value="arrow")
    return metadata, payload


def write_topic(data_dir: Path, name: str, messages: int, batch: int, make) -> list[bytes]:
    template, payload = make(batch)
    factory = ManagedLedgerFactory(data_dir)
    ledger = factory.open(f"public/default/persistent/{name}")
    entries = []
    for n in range(messages // batch):
        metadata = pb.MessageMetadata()
        metadata.CopyFrom(template)
        metadata.producer_name, metadata.sequence_id, metadata.publish_time = "bench", n * batch, 1_700_000_000_000 + n
        entry = build_entry(metadata, payload)
        ledger.append(entry)
        if n < 1000:
            entries.append(entry)
    factory.close()
    return entries


def decode_rate(entries: list[bytes]) -> float:
    start = time.perf_counter()
    rows = sum(b.num_rows for b in rows_of_entries(((1, i, e) for i, e in enumerate(entries)), "t", -1))
    return rows / (time.perf_counter() - start)


def spark_rates(data_dir: Path, topics: list[str], runs: int) -> dict[str, list[float]]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415

    import magnetar.spark  # noqa: PLC0415

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    seconds: dict[str, list[float]] = {topic: [] for topic in topics}
    frames = {topic: spark.read.format("magnetar").option("topic", topic).load(str(data_dir)) for topic in topics}
    for frame in frames.values():
        frame.limit(1).collect()  # start the Python workers outside the timing
    for _ in range(runs):
        for topic, frame in frames.items():  # alternate, so neither always runs on a warmer JVM
            start = time.perf_counter()
            frame.selectExpr("count(*)", "sum(length(value))").collect()
            seconds[topic].append(time.perf_counter() - start)
    spark.stop()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-payload-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        samples = {name: write_topic(data_dir, name, args.messages, args.batch, make)
                   for name, make in (("pulsar", pulsar_payload), ("arrow", arrow_payload))}
        decode = {name: round(decode_rate(entries)) for name, entries in samples.items()}
        seconds = spark_rates(data_dir, list(samples), args.runs)
    rows = args.messages // args.batch * args.batch
    rates = {name: round(rows / statistics.median(runs)) for name, runs in seconds.items()}
    print(json.dumps({
        "messages": rows, "batch": args.batch, "value_bytes": len(VALUE), "spark": "local[2]",
        "spark_rows_per_s": rates,
        "spark_seconds_per_run": {name: [round(s, 2) for s in runs] for name, runs in seconds.items()},
        "arrow_over_pulsar": round(rates["arrow"] / rates["pulsar"], 2),
        "decode_one_core_rows_per_s": decode,
        "load_average": os.getloadavg()[0],
    }, indent=2))


if __name__ == "__main__":
    main()
