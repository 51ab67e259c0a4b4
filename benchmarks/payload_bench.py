"""Consume N messages of `--size` bytes written as Pulsar batches, Arrow entries and Kafka batches.

Prints one JSON document: msg/s and client CPU seconds per million messages for
  pulsar_receive       magnetar receive() on Pulsar batches (1000 per entry)
  pulsar_receive_arrow magnetar receive_arrow() on the same topic
  arrow_receive_arrow  magnetar receive_arrow() on Arrow entries (--arrow-rows per entry)
  kafka_receive        magnetar receive() on Kafka record batches (1000 per entry)
  official_receive     the official pulsar-client's receive() on the Pulsar-batch topic
and the ratios receive_arrow / official receive(). The broker runs in its own process; the
CPU is this (client) process's only. Usage: python benchmarks/payload_bench.py [--count N]
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


def consume(url: str, topic: str, count: int, how: str, processor: str | None = None) -> dict[str, float]:
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
    start_wall, start_cpu = time.perf_counter(), cpu()
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
    client.close()
    return {"msg_per_s": round(got / wall), "cpu_s_per_million": round(used / got * 1e6, 3), "messages": got}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--arrow-rows", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = Standalone(Path(tmp) / "data", []).start()
        try:
            client = mc.Client(broker.url)
            topics = fill(client, args.count, args.size, args.arrow_rows)
            client.close()
            n = args.count
            results = {
                "pulsar_receive": consume(broker.url, topics["pulsar"], n, "receive"),
                "pulsar_receive_arrow": consume(broker.url, topics["pulsar"], n, "arrow"),
                "arrow_receive_arrow": consume(broker.url, topics["arrow"], n, "arrow", "arrow"),
                "kafka_receive": consume(broker.url, topics["kafka"], n, "receive", "kafka"),
                "official_receive": consume(broker.url, topics["pulsar"], n, "official"),
            }
        finally:
            broker.stop()
    official = results["official_receive"]["msg_per_s"]
    results["ratio_vs_official_receive"] = {
        name: round(results[name]["msg_per_s"] / official, 2)
        for name in ("pulsar_receive", "pulsar_receive_arrow", "arrow_receive_arrow", "kafka_receive")}
    print(json.dumps({"count": args.count, "size": args.size, "cpus": os.cpu_count(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
