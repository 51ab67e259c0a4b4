"""Spark source benchmark: rows/s from a data dir on local[2] vs one official-client consumer,
and entries read for "the last 1% by broker_time" vs a full scan. Prints one JSON object.

The topic is written straight into storage with the bytes a batching producer sends
(batches of --batch 100-byte messages, PIP-70 prefix as the interceptors stamp it), which
takes seconds instead of minutes; then a real broker serves that data dir to the official
client's consumer, and Spark reads the same dir while the broker runs.

The full count runs --spark-runs times in one session: the first pays for the JVM's JIT
warming up, so every run is reported and the ratio uses the median. The load average is
printed too: the figures are only comparable between runs on an equally idle machine.
`decode_one_core_rows_per_s` is the storage path alone (entries to Arrow batches, no Spark)
in this process, on the first --decode-messages messages.

Usage: python benchmarks/spark_bench.py [--messages 10000000] [--batch 1000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import CLK_TCK, descendants
from procfs import cpu_seconds as tree_cpu_seconds
from pyspark.sql.datasource import GreaterThanOrEqual
from standalone import Standalone

from magnetar.spark.options import parse_options
from magnetar.spark.source import MagnetarBatchReader
from magnetar.spark.storage_reader import EntryRange, read_range
from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import add_broker_entry_metadata, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

TOPIC = "bench"
NAME = "public/default/persistent/bench"
INTERCEPTORS = (
    "brokerEntryMetadataInterceptors=org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)


def write_topic(data_dir: Path, messages: int, batch: int) -> tuple[int, int]:
    """Write the topic; return (entries, broker time of the first entry of the last 1%)."""
    factory = ManagedLedgerFactory(data_dir)
    ml = factory.open(NAME)
    value = b"v" * 100
    singles = [(pb.SingleMessageMetadata(sequence_id=i), value) for i in range(batch)]
    payload = encode_batch(singles)
    entries = messages // batch
    index = -1
    base = 1_700_000_000_000
    for n in range(entries):
        metadata = pb.MessageMetadata(
            producer_name="bench", sequence_id=n * batch, publish_time=base + n, num_messages_in_batch=batch
        )
        index += batch
        bem = pb.BrokerEntryMetadata(broker_timestamp=base + n, index=index)
        ml.append(add_broker_entry_metadata(build_entry(metadata, payload), bem))
    factory.close()
    return entries, base + entries - max(1, entries // 100)


def consumer_rate(url: str, messages: int) -> float:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(
        TOPIC, "bench", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=10_000
    )
    start = time.perf_counter()
    for _ in range(messages):
        consumer.acknowledge(consumer.receive())
    elapsed = time.perf_counter() - start
    client.close()
    return messages / elapsed


def decode_rate(data_dir: Path, messages: int) -> float:
    """Rows/s of the storage path alone (read + decode into Arrow batches) on one core."""
    reader = MagnetarBatchReader(parse_options({"path": str(data_dir), "topic": TOPIC}))
    rows, seconds = 0, 0.0
    for work in (p.value for p in reader.partitions()):
        assert isinstance(work, EntryRange)
        start = time.perf_counter()
        rows += sum(batch.num_rows for batch in read_range(str(data_dir), work))
        seconds += time.perf_counter() - start
        if rows >= messages:
            break
    return rows / seconds


def load() -> float:
    return round(os.getloadavg()[0], 2)


def cpu_seconds() -> tuple[float, float]:
    """(CPU seconds the whole machine has been busy, of which this process tree): the
    difference over a run is what other processes took from the cores meanwhile."""
    tree = tree_cpu_seconds(*descendants(os.getpid()))
    busy = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = busy[3] + busy[4]  # idle + iowait
    return (sum(busy[:8]) - idle) / CLK_TCK, tree


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--consumer-messages", type=int, default=1_000_000, help="messages the consumer drains")
    parser.add_argument("--spark-runs", type=int, default=3, help="timed full counts in one Spark session")
    parser.add_argument("--decode-messages", type=int, default=2_000_000, help="messages decoded without Spark")
    parser.add_argument("--dir")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="spark-bench-"))
    data_dir = root / "data"
    if data_dir.exists():  # writing again would append a second copy of the topic
        parser.error(f"{data_dir} exists; pass a --dir without a data directory")
    t0 = time.perf_counter()
    entries, last_percent_time = write_topic(data_dir, args.messages, args.batch)
    write_s = time.perf_counter() - t0

    decode = decode_rate(data_dir, args.decode_messages)
    loads = {"before_consumer": load()}
    broker = Standalone(data_dir, [INTERCEPTORS]).start()
    try:
        consumed = min(args.consumer_messages, args.messages)
        consumer = consumer_rate(broker.url, consumed)
        loads["before_spark"] = load()

        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession  # noqa: PLC0415

        import magnetar.spark  # noqa: PLC0415

        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        magnetar.spark.register(spark)
        df = spark.read.format("magnetar").option("topic", TOPIC).load(str(data_dir))
        df.limit(1).collect()  # start the Python workers once, outside the timing
        runs = []
        machine_before, ours_before = cpu_seconds()
        for _ in range(args.spark_runs):
            start = time.perf_counter()
            rows = df.count()
            runs.append(time.perf_counter() - start)
        machine_after, ours_after = cpu_seconds()
        spark_cpu = ours_after - ours_before
        others_cpu = max(0.0, machine_after - machine_before - spark_cpu)
        loads["after_spark"] = load()
        start = time.perf_counter()
        recent = df.where(f"broker_time >= timestamp_millis({last_percent_time})").count()
        recent_s = time.perf_counter() - start
        spark.stop()
    finally:
        broker.stop()

    reader = MagnetarBatchReader(parse_options({"path": str(data_dir), "topic": TOPIC}))
    since = datetime.datetime.fromtimestamp(last_percent_time / 1000, datetime.UTC)
    reader.pushed.accept(GreaterThanOrEqual(("broker_time",), since))
    plans = reader.plan()
    pushed_reads = sum(p.entries_searched + p.entries_to_read for p in plans)
    spark_s = statistics.median(runs)
    spark_rate = rows / spark_s
    print(
        json.dumps(
            {
                "messages": args.messages,
                "entries": entries,
                "write_seconds": round(write_s, 1),
                "decode_one_core_rows_per_s": round(decode),
                "spark_local2_rows": rows,
                "spark_local2_seconds_per_run": [round(r, 2) for r in runs],
                "spark_local2_rows_per_s_per_run": [round(rows / r) for r in runs],
                "spark_local2_seconds": round(spark_s, 2),
                "spark_local2_rows_per_s": round(spark_rate),
                "official_consumer_messages": consumed,
                "official_consumer_msgs_per_s": round(consumer),
                "spark_vs_consumer": round(spark_rate / consumer, 2),
                "last_1pct_rows": recent,
                "last_1pct_seconds": round(recent_s, 2),
                "last_1pct_entries_read": pushed_reads,
                "full_scan_entries_read": entries,
                "full_scan_vs_pushdown_entries": round(entries / max(1, pushed_reads), 1),
                "cpus": os.cpu_count(),
                "spark_runs_cpu_seconds": round(spark_cpu, 1),
                "other_processes_cpu_seconds_during_spark_runs": round(others_cpu, 1),
                "spark_runs_wall_seconds": round(sum(runs), 1),
                "load_average_1m": loads,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
