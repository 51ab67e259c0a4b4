"""The event loop's longest turns while Kafka producers send 1 MB requests (issue 45's "no turn over 5 ms").

    .venv/bin/python benchmarks/kafka_turns_bench.py
    .venv/bin/python benchmarks/kafka_turns_bench.py --magnetar before=/path/to/old/src --magnetar after=src --rounds 2

Per cell, a `magnetar standalone --kafka 0` (PYTHONPATH=SRC, with benchmarks/stage_probe timing
each loop turn's work, its wait for events left out) takes, for `--seconds`:
- a Kafka producer sending 100-byte records as fast as it can in requests of about 1 MB:
  confluent-kafka (batch.size and message.max.bytes 1 MB, linger.ms 50) or kafka-python
  (batch_size and max_request_size 1 MB, linger_ms 50), one cell each;
- an official Pulsar producer (batching off) publishing at 1,000 msg/s, open loop, on another
  topic: the other client every long turn makes wait.

Prints ONE JSON object: per label, client and round the Kafka records/s, the Pulsar
publish latency (p50/p99/max ms, from each message's scheduled send), the loop turns
(count, p99/p99.9/max ms) and how many worked over 5 ms, and the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path

import pulsar
from _broker_process import Standalone, add_tree_options, official_client, trees_by_round
from _latency_drivers import Latencies, open_loop, payload, summary
from latency_bench import STAGE_PROBE_DIR, StageProbe

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
PULSAR_RATE = 1000
VALUE = b"v" * 100
REQUEST_BYTES = 1 << 20


def confluent_sender(bootstrap: str, topic: str, stop: threading.Event) -> int:
    from confluent_kafka import Producer  # noqa: PLC0415

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": REQUEST_BYTES,
                         "message.max.bytes": REQUEST_BYTES, "queue.buffering.max.kbytes": 65536})
    sent = 0
    while not stop.is_set():
        try:
            producer.produce(topic, VALUE)
            sent += 1
        except BufferError:
            producer.poll(0.005)
    producer.flush(60)
    return sent


def kafka_python_sender(bootstrap: str, topic: str, stop: threading.Event) -> int:
    from kafka import KafkaProducer  # noqa: PLC0415

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=REQUEST_BYTES,
                             max_request_size=REQUEST_BYTES)
    sent = 0
    while not stop.is_set():
        producer.send(topic, VALUE)
        sent += 1
    producer.flush(60)
    producer.close()
    return sent


SENDERS = {"confluent-kafka": confluent_sender, "kafka-python": kafka_python_sender}


def pulsar_publisher(url: str, topic: str, stop: threading.Event, latencies: Latencies) -> None:
    client = official_client(url)
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=5000,
                                      block_if_queue_full=True)

    def send(index: int, scheduled_ns: int) -> None:
        producer.send_async(payload(index, scheduled_ns),
                            lambda result, _id: latencies.record(index, scheduled_ns, result == pulsar.Result.Ok))

    second = 0
    while not stop.is_set():  # a second at a time, so the run ends with the Kafka sender's
        open_loop(lambda i, due, first=second * PULSAR_RATE: send(first + i, due), PULSAR_RATE, PULSAR_RATE)
        second += 1
    producer.flush()
    client.close()


def cell(broker: Standalone, probe: StageProbe, client: str, seconds: float) -> dict[str, object]:
    bootstrap = f"127.0.0.1:{KAFKA_READY.findall(broker.log())[-1]}"
    serial = time.monotonic_ns()
    stop = threading.Event()
    latencies = Latencies(skip=0)
    publisher = threading.Thread(target=pulsar_publisher, daemon=True,
                                 args=(broker.url, f"turns-pulsar-{serial}", stop, latencies))
    sent: list[int] = []
    kafka_topic = f"turns-kafka-{serial}"
    sender = threading.Thread(target=lambda: sent.append(SENDERS[client](bootstrap, kafka_topic, stop)), daemon=True)
    probe.reset()
    publisher.start()
    started = time.perf_counter()
    sender.start()
    time.sleep(seconds)
    stop.set()
    sender.join(120)
    wall = time.perf_counter() - started
    publisher.join(60)
    stages = probe.read()
    long_turns = probe.timeline()["long_turns"]
    turns = stages.get("loop_iteration", {})
    return {"kafka_records_per_s": round(sent[0] / wall) if sent else None,
            "pulsar_publish_ms": {k: summary(latencies.values)[k] for k in ("count", "p50", "p99", "max")},
            "pulsar_errors": latencies.failed,
            "loop_turns": {k: turns.get(k) for k in ("count", "p99", "p99.9", "max")},
            "loop_turns_over_5ms": sum(1 for start, end, _cpu in long_turns if end - start > 0.005),
            "loop_turns_over_2ms": len(long_turns),
            # a turn's wall time includes the loop thread waiting for a core or the GIL: its
            # own CPU time is what the broker's work took
            "loop_turn_cpu_max_ms": round(max((cpu for *_, cpu in long_turns), default=0) * 1000, 2),
            "loop_turns_cpu_over_5ms": sum(1 for *_, cpu in long_turns if cpu > 0.005)}


def run(label: str, source: str, clients: list[str], seconds: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="kafka-turns-") as directory:
        probe = StageProbe(Path(directory) / "stages.json")
        env = {"PYTHONPATH": os.pathsep.join([str(STAGE_PROBE_DIR), str(Path(source).resolve())]),
               "STAGE_PROBE_FILE": str(probe.path)}
        broker = Standalone(Path(directory) / "data", [], args=["--kafka", "0"], env=env).start()
        try:
            return {f"{label} {client}": cell(broker, probe, client, seconds) for client in clients}
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_tree_options(parser)
    parser.add_argument("--clients", default=",".join(SENDERS), help="comma-separated: " + ", ".join(SENDERS))
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds the Kafka producer sends per cell")
    args = parser.parse_args()
    load_start = os.getloadavg()
    results: dict[str, object] = {}
    for round_, label, source in trees_by_round(args):
        for name, figures in run(label, source, args.clients.split(","), args.seconds).items():
            results[f"{name} round {round_}"] = figures
    print(json.dumps({"cells": results, "load_start": load_start, "load_end": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
