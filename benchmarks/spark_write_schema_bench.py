"""Typed writes vs raw bytes: rows/s of the Spark sink writing a 6-field struct `value` (an AVRO
schema, Avro encoded column by column) against today's binary `value` of about the same size,
both on local[2] through `service.url` in one run; and, in this process, the encoder alone:
the columnar encoder against fastavro's `schemaless_writer` row by row (the fallback) on the
same Arrow batches. Prints one JSON object with the load average.

Usage: python benchmarks/spark_write_schema_bench.py [--rows 2000000] [--encode-rows 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_write_bench import stored_counts
from standalone import Standalone

from magnetar.admin_client import AdminClient

EVENT_COLUMNS = ("concat('user-', cast(id % 1000 as string)) as name", "id", "id / 7 as score",
                 "id % 2 = 0 as active", "cast(id % 100 as int) as count",
                 "if(id % 3 = 0, 't', null) as tag")


def events(spark: object, rows: int) -> object:
    """The 6-field record of benchmarks/spark_schema_bench.py, as a struct `value`."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    df = spark.range(rows, numPartitions=2).selectExpr(*EVENT_COLUMNS)  # type: ignore[attr-defined]
    return df.select(F.struct(*df.columns).alias("value"))


def binary(spark: object, rows: int) -> object:
    """Today's write: a binary `value` of the Avro records' size (about 30 bytes)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    return spark.range(rows, numPartitions=2).select(  # type: ignore[attr-defined]
        F.concat(F.lit("x" * 20), F.lpad(F.col("id").cast("string"), 10, "0")).cast("binary").alias("value"))


def timed_write(df: object, url: str, topic: str) -> float:
    start = time.perf_counter()
    df.write.format("magnetar").option("service.url", url).option("topic", topic).mode("append").save()  # type: ignore[attr-defined]
    return time.perf_counter() - start


def encoder_rates(spark: object, rows: int) -> dict[str, float]:
    """Rows/s of the columnar encoder and of fastavro row by row, on 10,000-row Arrow batches."""
    from magnetar.spark.value_encoding import ValueEncoder, encode_rows  # noqa: PLC0415
    from magnetar.spark.value_schemas import value_schema_for  # noqa: PLC0415

    df = events(spark, rows)
    schema = value_schema_for(df.schema["value"].dataType)  # type: ignore[attr-defined]
    batches = [b.column("value") for b in df.toArrow().to_batches(max_chunksize=10_000)]  # type: ignore[attr-defined]
    encoder = ValueEncoder(schema)
    start = time.perf_counter()
    for batch in batches:
        encoder.column(batch)
    columnar = time.perf_counter() - start
    start = time.perf_counter()
    for batch in batches:
        encode_rows(batch, encoder.definition)
    per_row = time.perf_counter() - start
    return {"columnar_rows_per_s": round(rows / columnar), "fastavro_per_row_rows_per_s": round(rows / per_row),
            "columnar_vs_fastavro": round(per_row / columnar, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--encode-rows", type=int, default=200_000)
    args = parser.parse_args()
    loads = {"start": round(os.getloadavg()[0], 2)}
    with tempfile.TemporaryDirectory(prefix="spark-write-schema-bench-") as root:
        broker = Standalone(Path(root) / "data").start()
        try:
            os.environ["PYSPARK_PYTHON"] = sys.executable
            from pyspark.sql import SparkSession  # noqa: PLC0415

            spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false") \
                .config("spark.ui.showConsoleProgress", "false").getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            timed_write(events(spark, 10_000), broker.url, "warm-up")  # workers started outside the timing
            typed = timed_write(events(spark, args.rows), broker.url, "typed")
            loads["after_typed"] = round(os.getloadavg()[0], 2)
            raw = timed_write(binary(spark, args.rows), broker.url, "binary")
            loads["after_binary"] = round(os.getloadavg()[0], 2)
            encoding = encoder_rates(spark, args.encode_rows)
            loads["after_encoders"] = round(os.getloadavg()[0], 2)
            spark.stop()
            stored_counts(AdminClient(broker.admin_url), ("typed", "binary"), args.rows)
        finally:
            broker.stop()
    print(json.dumps({
        "rows": args.rows,
        "spark_local2_struct_avro_rows_per_s": round(args.rows / typed),
        "spark_local2_binary_rows_per_s": round(args.rows / raw),
        "struct_vs_binary": round(raw / typed, 2),
        "encoder_only_6_field_record": encoding,
        "load_average": loads,
    }, indent=2))


if __name__ == "__main__":
    main()
