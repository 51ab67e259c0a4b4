"""What schemas cost per producer and per message, where a cache must keep the cost flat.

    .venv/bin/python benchmarks/schema_cost_bench.py [--quick]

Prints one JSON object:
- `producer_registrations_per_s`: a producer's schema found among a topic's live versions
  (SchemaRegistry.put_if_absent of the latest of `versions` evolving Avro records, on a
  SQLite metadata store), as every CommandProducer with a schema asks it; the registry
  compares the schema with every live version, so this is what parsing them costs;
- `kv_decodes_per_s`: magnetar.client's KeyValueSchema(StringSchema, AvroSchema) decoding
  INLINE values written with another version (the writer's KEY_VALUE definition split into
  its sides), as a consumer's `value()` does for each message.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from magnetar.client.schema import AvroSchema, Integer, KeyValue, KeyValueSchema, Record, String, StringSchema
from magnetar.schemas import CompatibilityStrategy, SchemaData, SchemaRegistry, SchemaType
from magnetar.schemas.definitions import join_key_value
from magnetar.storage import SqliteMetadataStore


def _record(fields: int) -> SchemaData:
    extra = [{"name": f"f{i}", "type": ["null", "string"], "default": None} for i in range(fields)]
    definition = {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}, *extra]}
    return SchemaData(SchemaType.AVRO, json.dumps(definition).encode())


def _rate(operation: Callable[[], object], seconds: float) -> float:
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        for _ in range(10):
            operation()
        done += 10
    return done / (time.perf_counter() - start)


def registrations(versions: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteMetadataStore(Path(tmp) / "metadata.db")
        try:
            registry = SchemaRegistry(store)
            for fields in range(versions):
                registry.put_if_absent("public/default/events", _record(fields), CompatibilityStrategy.FULL)
            latest = _record(versions - 1)
            # as a new producer's schema arrives: fresh bytes, equal to the stored ones
            return _rate(lambda: registry.put_if_absent("public/default/events", SchemaData(
                latest.type, bytes(bytearray(latest.data))), CompatibilityStrategy.FULL), seconds)
        finally:
            store.close()


class Point(Record):
    name = String()
    x = Integer(required_default=True)


class PointV0(Record):
    name = String()


def kv_decodes(seconds: float) -> float:
    reader = KeyValueSchema(StringSchema(), AvroSchema(Point))
    writer_schema = KeyValueSchema(StringSchema(), AvroSchema(PointV0))
    writer: SchemaData = join_key_value(StringSchema().schema_info(), AvroSchema(PointV0).schema_info())
    payload = writer_schema.encode(KeyValue("key", PointV0(name="p")))
    return _rate(lambda: reader.decode_with(payload, writer), seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short round (CI)")
    args = parser.parse_args()
    seconds = 0.3 if args.quick else 2.0
    versions = 20
    print(json.dumps({
        "benchmark": "schema_cost",
        "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "live_versions": versions,
        "producer_registrations_per_s": round(registrations(versions, seconds)),
        "kv_decodes_per_s": round(kv_decodes(seconds)),
    }))


if __name__ == "__main__":
    main()
