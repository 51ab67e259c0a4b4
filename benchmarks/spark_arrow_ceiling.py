"""The ceiling of a Python data source on Spark local[2]: the rows/s Spark reaches when the
reader does no work at all, yielding one ready RecordBatch (the magnetar source's own rows of
an Arrow entry, timestamps converted) again and again. Compare with spark_payload_bench's
Arrow figure: what is left between them is ours, the rest is Spark turning Arrow batches into
rows (Spark 4.3's PythonPartitionReaderFactory is row-based, supportColumnarReads = false,
and PythonScanBuilder pushes filters only, no column pruning). Prints one JSON object.

Usage: python benchmarks/spark_arrow_ceiling.py [--messages 5000000] [--batch 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spark_payload_bench as spb

from magnetar.spark.rows import rows_of_entries, with_timestamps


def ready_batch(rows: int) -> object:
    """The source's rows for one Arrow entry of `rows` messages."""
    metadata, payload = spb.arrow_payload(rows)
    metadata.producer_name, metadata.sequence_id, metadata.publish_time = "bench", 0, 1_700_000_000_000
    entry = spb.build_entry(metadata, payload)
    batches = list(rows_of_entries([(1, 0, entry)], "t", -1))
    return with_timestamps(batches[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: PLC0415

    from magnetar.spark.rows import spark_schema  # noqa: PLC0415

    batch = ready_batch(args.batch)
    repeats = args.messages // args.batch // 2

    class CeilingReader(DataSourceReader):
        def partitions(self) -> list:
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition: object) -> Iterator[object]:
            for _ in range(repeats):
                yield batch

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_ceiling"

        def schema(self) -> object:
            return spark_schema()

        def reader(self, schema: object) -> DataSourceReader:
            return CeilingReader()

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Ceiling)
    frame = spark.read.format("arrow_ceiling").load()
    frame.limit(1).collect()
    seconds = []
    for _ in range(args.runs):
        start = time.perf_counter()
        frame.selectExpr("count(*)", "sum(length(value))").collect()
        seconds.append(time.perf_counter() - start)
    spark.stop()
    rows = repeats * 2 * args.batch
    print(json.dumps({"messages": rows, "batch": args.batch, "spark": "local[2]",
                      "ceiling_rows_per_s": round(rows / statistics.median(seconds)),
                      "seconds_per_run": [round(s, 2) for s in seconds],
                      "load_average": os.getloadavg()[0]}, indent=2))


if __name__ == "__main__":
    main()
