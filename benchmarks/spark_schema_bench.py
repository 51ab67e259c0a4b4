"""Typed reads of a schema'd topic vs raw bytes: rows/s on local[2] for Avro records.

Two topics: `events`, a flat 6-field record, and `nested`, a record holding a nested record,
an array of strings, a map of longs, a decimal and a timestamp. The official client writes
--messages records to each with `AvroSchema` through a real broker (batching on, the Java
client's default; the Python client's is off); Spark then reads the broker's data dir with
the typed `value` column and with `valueFormat=bytes`, --runs times each alternately in one
session (after a warm-up read; medians are reported). Then, in this process, the decoder
alone on 65536 `nested` payloads: the columnar path against the row-by-row one it falls back
to (`decoder_rows_per_s`). Prints one JSON object, with the load average.

Usage: python benchmarks/spark_schema_bench.py [--messages 300000] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import decimal
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import fastavro
import pulsar
import pyarrow as pa
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


NESTED = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
        {"name": "name", "type": "string"}, {"name": "email", "type": ["null", "string"], "default": None}]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "quantities", "type": {"type": "map", "values": "long"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def _order(i: int) -> dict:
    return {"id": i, "customer": {"name": f"c-{i % 1000}", "email": None if i % 3 else f"c{i}@x"},
            "tags": [f"t{j}" for j in range(i % 4)], "quantities": {f"sku-{j}": j + i % 7 for j in range(i % 3)},
            "price": decimal.Decimal(i % 100_000).scaleb(-2), "at": EPOCH + datetime.timedelta(milliseconds=i)}


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
        producer = client.create_producer("nested", schema=AvroSchema(None, schema_definition=NESTED),
                                          block_if_queue_full=True, batching_enabled=True)
        for i in range(messages):
            producer.send_async(_order(i), None)
        producer.flush()
        producer.close()


def decoder_rates(rows: int = 65536, runs: int = 3) -> dict[str, int]:
    """Rows/s of the `nested` records' decoder alone: columnar vs row by row (fastavro)."""
    from magnetar.schemas import SchemaData, SchemaType  # noqa: PLC0415
    from magnetar.spark.value_decoding import RecordDecoder  # noqa: PLC0415

    parsed = fastavro.parse_schema(NESTED)
    payloads = []
    for i in range(rows):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, _order(i))
        payloads.append(out.getvalue())
    values, versions = pa.array(payloads, pa.binary()), pa.array([0] * rows, pa.int64())
    schema = SchemaData(SchemaType.AVRO, json.dumps(NESTED).encode())
    decoder = RecordDecoder(schema, lambda version: schema)
    paths = {"columnar": lambda: decoder.column(values, versions, values),
             "row": lambda: pa.array(decoder.records(payloads, [0] * rows), decoder.type)}
    assert paths["columnar"]().equals(paths["row"]())
    rates = {}
    for name, decode in paths.items():
        taken = []
        for _ in range(runs):
            started = time.perf_counter()
            decode()
            taken.append(time.perf_counter() - started)
        rates[name] = round(rows / statistics.median(taken))
    return rates


def timed_read(spark: object, data_dir: Path, topic: str, value_format: str) -> float:
    started = time.perf_counter()
    (spark.read.format("magnetar").option("topic", topic).option("valueFormat", value_format)  # type: ignore[attr-defined]
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
            timed_read(spark, data_dir, "nested", "typed")  # warm-up: JVM, workers, imports
            times: dict[tuple[str, str], list[float]] = {
                (topic, kind): [] for topic in ("events", "nested") for kind in ("typed", "bytes")}
            for _ in range(args.runs):
                for (topic, kind), taken in times.items():
                    taken.append(timed_read(spark, data_dir, topic, kind))
            load = os.getloadavg()
            spark.stop()
        finally:
            broker.stop()
    rates = {key: args.messages / statistics.median(t) for key, t in times.items()}
    print(json.dumps({
        "messages": args.messages,
        **{f"{topic}_{kind}_rows_per_s": round(rate) for (topic, kind), rate in rates.items()},
        **{f"{topic}_typed_over_bytes": round(rates[topic, "typed"] / rates[topic, "bytes"], 3)
           for topic in ("events", "nested")},
        "runs_s": {f"{topic}_{kind}": [round(x, 3) for x in t] for (topic, kind), t in times.items()},
        "load_average_spark": load,
        "decoder_rows_per_s": decoder_rates(),
        "load_average": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
