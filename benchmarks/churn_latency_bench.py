"""Publish latency of a steady producer while other clients come and go (issue 45).

One magnetar per `--magnetar LABEL=SRC` (rounds alternate their order). In each cell a
producer publishes unbatched at `--rate` msg/s (open loop, a callback on every message)
on one topic while a churn client (official or magnetar.client) subscribes `--subscriptions`
consumers under new subscription names on another topic and creates `--topics` new topics
(a producer each), then closes them all. Printed as JSON per cell: the steady producer's
publish latency (ms), how long the churn took, and the broker's longest event-loop turns
(benchmarks/stage_probe: `loop_iteration`, its wait for events left out; the turns over 5 ms
by wall and by CPU time, the CPU one being the broker's own work) and its loop-lag
probes (/metrics).

    python benchmarks/churn_latency_bench.py --magnetar before=/tmp/base/src --magnetar after=src --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from _broker_figures import broker_between
from _latency_drivers import alternating_rounds, pulsar_client, pulsar_module, pulsar_publish, summary
from latency_bench import MagnetarUnderTest


def churn(client_kind: str, url: str, serial: int, subscriptions: int, topics: int) -> dict[str, float]:
    """New subscriptions on one topic, then new topics; every one closed at the end."""
    module = pulsar_module(client_kind)
    client = pulsar_client(module, url)
    made = []
    try:
        started = time.monotonic()
        topic = f"persistent://public/default/churn-subs-{serial}"
        for i in range(subscriptions):
            made.append(client.subscribe(topic, f"sub-{i}"))
        subscribed = time.monotonic()
        for i in range(topics):
            made.append(client.create_producer(f"persistent://public/default/churn-topic-{serial}-{i}"))
        created = time.monotonic()
        for item in made:
            item.close()
    finally:
        client.close()
    return {"subscribe_s": round(subscribed - started, 3), "create_topics_s": round(created - subscribed, 3)}


def turns_over(long_turns: list[list[float]], bound: float) -> dict[str, float | int]:
    """The loop's turns that worked over `bound`, by wall time and by the loop thread's CPU
    time: on a loaded machine a turn's wall time holds the time it waited for a core, its
    CPU time only the broker's own work."""
    cpu = [turn[2] for turn in long_turns]
    return {"loop_turns_over_5ms_wall": sum(end - start > bound for start, end, _ in long_turns),
            "loop_turns_over_5ms_cpu": sum(c > bound for c in cpu),
            "loop_turn_cpu_max_ms": round(max(cpu, default=0.0) * 1000, 3)}


def cell(broker: MagnetarUnderTest, client_kind: str, args: argparse.Namespace, serial: int) -> dict:
    module = pulsar_module(client_kind)
    steady = pulsar_client(module, broker.broker.url)
    count = int(args.rate * args.duration)
    assert broker.stages is not None
    before = broker.broker_figures()
    broker.stages.reset()
    outcome: dict = {}

    def run_churn() -> None:
        time.sleep(0.3)  # the producer is at its rate before the churn starts
        outcome.update(churn(client_kind, broker.broker.url, serial, args.subscriptions, args.topics))

    churner = threading.Thread(target=run_churn)
    churner.start()
    try:
        latencies, lag = pulsar_publish(steady, module, f"persistent://public/default/steady-{serial}", False, 1,
                                        args.rate, count, 0)
    finally:
        churner.join()
        steady.close()
    stages = broker.stages.read()
    long_turns = broker.stages.timeline()["long_turns"]
    return {"client": client_kind, "publish_ms": summary(latencies.values), "publish_failed": latencies.failed,
            "sender_lag_ms_max": round(lag, 3), **outcome,
            "loop_turn_ms": stages.get("loop_iteration", {}),
            **turns_over(long_turns, 0.005),
            **broker_between(before, broker.broker_figures())}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--magnetar", action="append", metavar="LABEL=SRC", required=True,
                        help="a magnetar to run from source tree SRC (repeatable)")
    parser.add_argument("--rate", type=int, default=1000, help="the steady producer's msg/s")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds the steady producer runs")
    parser.add_argument("--subscriptions", type=int, default=200)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--client", action="append", choices=("official", "magnetar"))
    args = parser.parse_args()
    args.client = args.client or ["official", "magnetar"]
    args.sources = {}
    for item in args.magnetar:
        label, sep, src = item.partition("=")
        if not sep or not label or not (Path(src) / "magnetar").is_dir():
            parser.error(f"--magnetar {item!r}: give LABEL=SRC, SRC a tree holding the magnetar package")
        args.sources[label] = src
    return args


def main() -> None:
    args = parse_args()
    labels = list(args.sources)
    load_start = os.getloadavg()
    results = []
    serial = 0
    with tempfile.TemporaryDirectory(prefix="magnetar-churn-") as tmp:
        for round_no, label, work in alternating_rounds(Path(tmp), labels, args.rounds):
            broker = MagnetarUnderTest(label, work, args.sources[label], [], stages=True)
            try:
                for client_kind in args.client:
                    serial += 1
                    figures = cell(broker, client_kind, args, serial)
                    results.append({"round": round_no + 1, "magnetar": label, **figures})
            finally:
                with contextlib.suppress(Exception):
                    broker.stop()
    json.dump({"load_start": load_start, "load_end": os.getloadavg(), "rate": args.rate,
               "subscriptions": args.subscriptions, "topics": args.topics, "results": results},
              sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
