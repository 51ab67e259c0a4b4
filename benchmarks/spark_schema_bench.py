"""Typed reads of a schema'd topic vs raw bytes: rows/s on local[2] for a 6-field Avro record.

The official client writes --messages records with `AvroSchema` through a real broker
(batching on, the Java client's default; the Python client's is off); Spark then reads the
broker's data dir with the typed `value` column and with `valueFormat=bytes`, --runs times
each alternately in one session (after a warm-up read; medians are reported). Prints one
JSON object, with the load average.

Usage: python benchmarks/spark_schema_bench.py [--messages 300000] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pulsar
from pulsar.schema import AvroSchema, Boolean, Double, Integer, Long, Record, String

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

INTERCEPTORS = (
    "brokerEntryMetadataInterceptors=org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)


class Event(Record):
    name = String(required=True)
    id = Long(required=True)
    score = Double(required=True)
    active = Boolean(required=True)
    count = Integer(required=True)
    tag = String()


def write(url: str, messages: int) -> None:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    with contextlib.closing(client):
        producer = client.create_producer("events", schema=AvroSchema(Event), block_if_queue_full=True,
                                          batching_enabled=True)
        for i in range(messages):
            producer.send_async(Event(name=f"user-{i % 1000}", id=i, score=i / 7, active=i % 2 == 0, count=i % 100,
                                      tag=None if i % 3 else "t"), None)
        producer.flush()
        producer.close()


def timed_read(spark: object, data_dir: Path, value_format: str) -> float:
    started = time.perf_counter()
    (spark.read.format("magnetar").option("topic", "events").option("valueFormat", value_format)  # type: ignore[attr-defined]
     .load(str(data_dir)).select("value").write.format("noop").mode("overwrite").save())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415 (after PYSPARK_PYTHON)

    import magnetar.spark  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        broker = Standalone(data_dir, [INTERCEPTORS]).start()
        try:
            write(broker.url, args.messages)
            spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate())
            spark.sparkContext.setLogLevel("ERROR")
            magnetar.spark.register(spark)
            timed_read(spark, data_dir, "typed")  # warm-up: JVM, workers, imports
            times: dict[str, list[float]] = {"typed": [], "bytes": []}
            for _ in range(args.runs):
                for kind, taken in times.items():
                    taken.append(timed_read(spark, data_dir, kind))
            spark.stop()
        finally:
            broker.stop()
    rates = {kind: args.messages / statistics.median(t) for kind, t in times.items()}
    print(json.dumps({
        "messages": args.messages,
        "record_fields": 6,
        "typed_rows_per_s": round(rates["typed"]),
        "bytes_rows_per_s": round(rates["bytes"]),
        "typed_over_bytes": round(rates["typed"] / rates["bytes"], 3),
        "runs_s": {kind: [round(x, 3) for x in t] for kind, t in times.items()},
        "load_average": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
