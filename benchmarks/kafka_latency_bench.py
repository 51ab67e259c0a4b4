"""Kafka listener latency at fixed rates with librdkafka at linger.ms=0 (issue 45's Kafka row).

    .venv/bin/python benchmarks/kafka_latency_bench.py                     # 1,000 and 10,000 records/s, 4 s each
    .venv/bin/python benchmarks/kafka_latency_bench.py --magnetar before=/path/to/old/src --magnetar after=src

Open loop: one confluent-kafka producer (linger.ms=0, acks=all, idempotence off: librdkafka's
defaults but the linger) sends 100-byte records at a fixed rate, each at its scheduled time,
and latency runs from that scheduled time to the delivery report, so a broker stall shows
instead of slowing the sender. The first second of each cell is sent but not counted. At
linger.ms=0 librdkafka sends a Produce request per record whenever it has one, pipelined
without waiting for answers: how the listener takes pipelined requests decides the figures.

Each `--magnetar LABEL=SRC` is a `magnetar standalone --kafka 0` run with PYTHONPATH=SRC, so
two versions compare side by side in one run; rounds alternate their order.

Prints ONE JSON object: per label and rate the records counted and their p50/p99/p99.9/max
(ms), delivery errors, how late the sender itself ran at worst (ms), the broker's CPU (% of
one core), what the broker says of itself over the cell (_broker_figures: its mean time from a
Produce read to its answer written, its young collections and the objects they freed, and how
many of its 100 ms loop-lag probes ran over 5 ms late), and the load average at start and end.
The open loop, the latency record and the percentiles are latency_bench.py's (_latency_drivers).
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

from _broker_figures import broker_between, broker_figures
from _broker_process import Meter, Standalone, add_tree_options, trees_by_round
from _latency_drivers import Latencies, open_loop, payload, summary
from confluent_kafka import Producer

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
WARMUP_SECONDS = 1.0


def cell(bootstrap: str, pid: int, admin_url: str, rate: int, seconds: float) -> dict[str, object]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    topic = f"latency-{rate}-{time.monotonic_ns()}"
    producer.list_topics(topic, timeout=30)
    count = int(rate * (seconds + WARMUP_SECONDS))
    latencies = Latencies(skip=int(rate * WARMUP_SECONDS))
    latencies.expected = count
    sent = threading.Event()

    def deliver() -> None:  # delivery reports run in poll(): a thread of their own, so none waits for a send
        while not (sent.is_set() and latencies.done.is_set()):
            producer.poll(0.0005)

    def send(index: int, scheduled_ns: int) -> None:
        producer.produce(topic, payload(index, scheduled_ns),
                         on_delivery=lambda err, _msg: latencies.record(index, scheduled_ns, err is None))

    poller = threading.Thread(target=deliver, daemon=True)
    before = broker_figures(admin_url)
    with Meter(pid) as meter:
        poller.start()
        sender_lag = open_loop(send, rate, count)
        sent.set()
        latencies.done.wait(60)
    poller.join(5)
    broker = broker_between(before, broker_figures(admin_url))
    figures = summary(latencies.values)
    return {"records": figures.pop("count"), **figures, "errors": latencies.failed,
            "sender_lag_ms_max": round(sender_lag, 2), "broker_cpu_pct": round(meter.cpu[pid] / meter.wall * 100, 1),
            **broker}


def run(label: str, source: str, rates: list[int], seconds: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="kafka-latency-") as directory:
        broker = Standalone(Path(directory) / "data", [], args=["--kafka", "0"],
                            env={"PYTHONPATH": str(Path(source).resolve())}).start()
        try:
            bootstrap = f"127.0.0.1:{KAFKA_READY.findall(broker.log())[-1]}"
            assert broker.proc is not None
            return {f"{label} {rate}/s": cell(bootstrap, broker.proc.pid, broker.admin_url, rate, seconds)
                    for rate in rates}
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_tree_options(parser)
    parser.add_argument("--rates", default="1000,10000", help="records/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per cell")
    args = parser.parse_args()
    rates = [int(rate) for rate in args.rates.split(",")]
    load_start = os.getloadavg()
    results: dict[str, object] = {}
    for round_, label, source in trees_by_round(args):
        for name, figures in run(label, source, rates, args.seconds).items():
            results[f"{name} round {round_}"] = figures
    print(json.dumps({"cells": results, "load_start": load_start, "load_end": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
