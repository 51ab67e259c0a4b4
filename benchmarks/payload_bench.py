"""Consume N messages of `--size` bytes written as Pulsar batches, Arrow entries and Kafka batches.

Prints one JSON document: msg/s and client CPU seconds per million messages for
  pulsar_receive       magnetar receive() on Pulsar batches (1000 per entry)
  pulsar_receive_arrow magnetar receive_arrow() on the same topic
  arrow_receive_arrow  magnetar receive_arrow() on Arrow entries (--arrow-rows per entry)
  kafka_receive        magnetar receive() on Kafka record batches (1000 per entry)
  official_receive     the official pulsar-client's receive() on the Pulsar-batch topic
and the ratios receive_arrow / official receive(). The broker runs in its own process:
`cpu_s_per_million` is this (client) process's CPU, `broker_cpu_s_per_million` the broker's
(from /proc), so a run says which side sets the pace. `--paths` runs some of them only (to
profile one, or to compare two trees quickly); the ratios need `official_receive`.
Usage: python benchmarks/payload_bench.py [--count N] [--paths arrow_receive_arrow,...]
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
import pyarrow as pa
from procfs import cpu_seconds
from standalone import Standalone

import magnetar.client as mc
from magnetar.formats.kafka_records import encode_record_batch
from magnetar.wire.entry import FORMAT_PROPERTY


def cpu() -> float:
    times = os.times()
    return times.user + times.system


def fill(client: mc.Client, count: int, size: int, arrow_rows: int) -> dict[str, str]:
    value = b"x" * size
    topics = {kind: f"persistent://public/default/bench-{kind}-{os.getpid()}" for kind in ("pulsar", "arrow", "kafka")}
    producer = client.create_producer(topics["pulsar"], batching_enabled=True, batching_max_messages=1000,
                                      batching_max_allowed_size_in_bytes=4 << 20, max_pending_messages=0,
                                      batching_max_publish_delay_ms=100)
    for _ in range(count):
        producer.send_async(value, None)
    producer.flush()
    producer = client.create_producer(topics["arrow"])
    table = pa.table({"value": pa.array([value] * arrow_rows, pa.binary())})
    for start in range(0, count, arrow_rows):
        producer.send_arrow(table.slice(0, min(arrow_rows, count - start)))
    producer = client.create_producer(topics["kafka"])
    for start in range(0, count, 1000):
        n = min(1000, count - start)
        batch = encode_record_batch([(None, value, (), 1_700_000_000_000)] * n)
        producer.send_entry(batch, {"properties": {FORMAT_PROPERTY: "kafka"}}, n)
    return topics


def consume(url: str, topic: str, count: int, how: str, processor: str | None = None,
            broker_pid: int = 0) -> dict[str, float]:
    if how == "official":
        import pulsar  # noqa: PLC0415

        client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=10000)
    else:
        client = mc.Client(url)
        # A columnar reader takes whole entries: a queue of several entries keeps the broker
        # sending while the application builds columns (one entry's worth waits a round trip).
        queue = 100_000 if how == "arrow" else 10_000
        reader = client.create_reader(topic, mc.MessageId.earliest, receiver_queue_size=queue,
                                      payload_processor=processor)
    start_wall, start_cpu, start_broker = time.perf_counter(), cpu(), cpu_seconds(broker_pid)
    got = 0
    if how == "arrow":
        while got < count:
            got += reader.read_arrow(100_000, 10_000).num_rows
    else:
        read = reader.read_next
        for _ in range(count):
            read(10_000)
        got = count
    wall, used = time.perf_counter() - start_wall, cpu() - start_cpu
    broker_used = cpu_seconds(broker_pid) - start_broker
    client.close()
    return {"msg_per_s": round(got / wall), "cpu_s_per_million": round(used / got * 1e6, 3),
            "broker_cpu_s_per_million": round(broker_used / got * 1e6, 3), "messages": got}


#: path -> (topic kind, how it is read, payload processor)
PATHS = {
    "pulsar_receive": ("pulsar", "receive", None),
    "pulsar_receive_arrow": ("pulsar", "arrow", None),
    "arrow_receive_arrow": ("arrow", "arrow", "arrow"),
    "kafka_receive": ("kafka", "receive", "kafka"),
    "official_receive": ("pulsar", "official", None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--arrow-rows", type=int, default=10_000)
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated, of: " + ", ".join(PATHS))
    args = parser.parse_args()
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"--paths: unknown {', '.join(unknown)}; known: {', '.join(PATHS)}")
    with tempfile.TemporaryDirectory() as tmp:
        broker = Standalone(Path(tmp) / "data", []).start()
        try:
            client = mc.Client(broker.url)
            topics = fill(client, args.count, args.size, args.arrow_rows)
            client.close()
            assert broker.proc is not None
            results: dict[str, dict] = {}
            for name in paths:
                kind, how, processor = PATHS[name]
                results[name] = consume(broker.url, topics[kind], args.count, how, processor, broker.proc.pid)
        finally:
            broker.stop()
    if "official_receive" in results:
        official = results["official_receive"]["msg_per_s"]
        results["ratio_vs_official_receive"] = {
            name: round(results[name]["msg_per_s"] / official, 2) for name in results if name != "official_receive"}
    print(json.dumps({"count": args.count, "size": args.size, "cpus": os.cpu_count(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
