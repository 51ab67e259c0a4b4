"""Spark source rows/s on local[2]: Arrow IPC entries (PIP-96) against Pulsar batches of the
same messages, and against Spark's own ceiling for a Python data source, side by side in one
session. Prints one JSON object.

Both topics are written straight into one data directory: --messages 100-byte messages,
--batch per entry, as a batching producer and `producer.send_arrow` write them. The ceiling
is a data source that does no work: it yields one ready RecordBatch of the magnetar source's
rows of the Arrow topic (as many rows as the source's first batch), again and again, over as
many partitions, for as many rows. What lies between it and the Arrow figure is ours; the
rest is Spark taking Arrow batches from the Python worker into rows (Spark 4.3's
PythonPartitionReaderFactory has no columnar reads, and PythonScanBuilder prunes no columns).
Each query sums the value lengths (so every value is read, not only counted) --runs times;
the median is reported, of wall time and of the CPU time of all the session's processes
(steadier than wall time on a shared machine). `decode_one_core_rows_per_s` is the same
entries turned into Arrow batches in this process, without Spark. A run takes ~75 s.

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
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from magnetar.formats.arrow_ipc import encode_arrow_batches
from magnetar.spark.options import parse_options
from magnetar.spark.rows import rows_of_entries, spark_schema, with_timestamps
from magnetar.spark.source import MagnetarBatchReader
from magnetar.spark.storage_reader import EntryRange, read_range
from magnetar.spark.worker_heap import freeze_long_lived
from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import FORMAT_PROPERTY, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

VALUE = b"v" * 100
FORMATS = ("pulsar", "arrow")


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


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and every process under it (the JVM, Python daemons and workers),
    reaped children included: on a shared machine, what a query cost rather than how long."""
    parents, ticks = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    total = 0
    for pid, tick in ticks.items():
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            total += tick
    return total / os.sysconf("SC_CLK_TCK")


class CeilingReader(DataSourceReader):
    """Yields one ready batch `repeats[i]` times in partition i: Spark's cost alone.

    It carries one entry's rows and joins `copies` of them into the batch where it reads:
    a whole batch in the reader would be pickled into every task (13 MB for 66,000 rows),
    and Spark's cost of shipping that is no part of a reader's. It freezes the worker's heap
    as the magnetar source does, or the gc.collect() Spark's daemon runs after each task
    (50-150 ms) would be most of its time and it would be no ceiling."""

    def __init__(self, seed: pa.RecordBatch, copies: int, repeats: list[int]) -> None:
        self.seed = seed
        self.copies = copies
        self.repeats = repeats

    @property
    def batch_rows(self) -> int:
        return self.seed.num_rows * self.copies

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(n) for n in self.repeats]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        freeze_long_lived()
        batch = pa.concat_batches([self.seed] * self.copies)
        for _ in range(partition.value):
            yield batch


class Ceiling(DataSource):
    """`format("magnetar_ceiling")`; the reader is given by `ceiling_of` (pickled to the workers)."""

    reader_template: CeilingReader | None = None

    @classmethod
    def name(cls) -> str:
        return "magnetar_ceiling"

    def schema(self) -> object:
        return spark_schema()

    def reader(self, schema: object) -> DataSourceReader:
        assert self.reader_template is not None
        return self.reader_template


def ceiling_of(data_dir: Path, topic: str, rows: int) -> CeilingReader:
    """Batches as large as the magnetar source's first of `topic`, made of the rows of its
    first entry, repeated over as many partitions as the source plans for it, for `rows`
    rows in all (whole batches, spread evenly)."""
    options = parse_options({"path": str(data_dir), "topic": topic}, streaming=False)
    partitions = MagnetarBatchReader(options).partitions()
    first = partitions[0].value
    assert isinstance(first, EntryRange)
    batch_rows = next(iter(read_range(str(data_dir), first))).num_rows
    seed = with_timestamps(next(iter(read_range(str(data_dir), replace(first, entries=1)))))
    copies = batch_rows // seed.num_rows
    share, extra = divmod(rows // (seed.num_rows * copies), len(partitions))
    return CeilingReader(seed, copies, [share + (i < extra) for i in range(len(partitions))])


Samples = dict[str, list[float]]


def spark_rates(data_dir: Path, ceiling: CeilingReader, runs: int) -> tuple[Samples, Samples]:
    """Wall and CPU seconds (all processes of the session) of each query, per run."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415

    import magnetar.spark  # noqa: PLC0415

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    Ceiling.reader_template = ceiling
    spark.dataSource.register(Ceiling)
    frames = {topic: spark.read.format("magnetar").option("topic", topic).load(str(data_dir)) for topic in FORMATS}
    frames["ceiling"] = spark.read.format("magnetar_ceiling").load()
    seconds: Samples = {name: [] for name in frames}
    cpu: Samples = {name: [] for name in frames}
    for frame in frames.values():
        frame.limit(1).collect()  # start the Python workers outside the timing
    for _ in range(runs):
        for name, frame in frames.items():  # alternate, so none always runs on a warmer JVM
            cpu_start, start = tree_cpu_seconds(os.getpid()), time.perf_counter()
            frame.selectExpr("count(*)", "sum(length(value))").collect()
            seconds[name].append(time.perf_counter() - start)
            cpu[name].append(tree_cpu_seconds(os.getpid()) - cpu_start)
    spark.stop()
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="spark-payload-bench-") as tmp:
        data_dir = Path(tmp) / "data"
        samples = {name: write_topic(data_dir, name, args.messages, args.batch, make)
                   for name, make in zip(FORMATS, (pulsar_payload, arrow_payload), strict=True)}
        decode = {name: round(decode_rate(entries)) for name, entries in samples.items()}
        rows = args.messages // args.batch * args.batch
        ceiling = ceiling_of(data_dir, "arrow", rows)
        seconds, cpu = spark_rates(data_dir, ceiling, args.runs)
    counts = {"pulsar": rows, "arrow": rows, "ceiling": sum(ceiling.repeats) * ceiling.batch_rows}
    rates = {name: round(counts[name] / statistics.median(runs)) for name, runs in seconds.items()}
    print(json.dumps({
        "messages": rows, "batch": args.batch, "value_bytes": len(VALUE), "spark": "local[2]",
        "spark_partitions": len(ceiling.repeats), "ceiling_batch_rows": ceiling.batch_rows,
        "ceiling_rows": counts["ceiling"],
        "spark_rows_per_s": rates,
        "spark_seconds_per_run": {name: [round(s, 2) for s in runs] for name, runs in seconds.items()},
        "spark_cpu_seconds_per_million_rows": {
            name: round(statistics.median(runs) / counts[name] * 1e6, 2) for name, runs in cpu.items()},
        "arrow_over_pulsar": round(rates["arrow"] / rates["pulsar"], 2),
        "ceiling_over_pulsar": round(rates["ceiling"] / rates["pulsar"], 2),
        "arrow_over_ceiling": round(rates["arrow"] / rates["ceiling"], 2),
        "decode_one_core_rows_per_s": decode,
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }, indent=2))


if __name__ == "__main__":
    main()
