"""Geo-replication's throughput and lag between two brokers, side by side with the local path.

    .venv/bin/python benchmarks/replication_bench.py [--rates 10000,100000] [--seconds 5] [--rounds 2]

Two `magnetar standalone` processes on loopback ports, clusters `east` and `west`;
public/default on east replicates to west, which deduplicates. Per round and target rate the
official client (batching: 1000 messages or 10 ms, 100-byte messages carrying their send
time) produces on east paced to the rate; one consumer on east and one on west receive every
message. Lag is publish-on-east to receive, in ms, on east (the local path) and on west
(through the replicator): p50 and p99 each, and their ratio. Rates alternate within a round.
Prints ONE JSON object: per round and rate the achieved produce rate, the rate west received
at, the lags, and the medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from _broker_process import official_client, producer_options, start_standalone

from magnetar.admin_client import AdminClient

STAMP = struct.Struct("<Q")
PAYLOAD_PAD = b"x" * (100 - STAMP.size)
TICK = 0.01


def link(east, west) -> None:
    for broker, other, remote in ((east, "west", west), (west, "east", east)):
        admin = AdminClient(broker.admin_url)
        admin.create_cluster(other, {"serviceUrl": remote.admin_url, "brokerServiceUrl": remote.url})
        admin.update_tenant("public", [], ["east", "west"])
        admin.set_namespace_policy("public/default", "deduplication", True)
        # both list both: a cluster takes replication only from clusters its namespace lists
        admin.set_replication_clusters("public/default", ["east", "west"])


class Receiver:
    """Receives `expected` messages on a thread, keeping each one's lag in ms."""

    def __init__(self, consumer, expected: int) -> None:
        self.consumer, self.expected = consumer, expected
        self.lags: list[float] = []
        self.last = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while len(self.lags) < self.expected:
            try:
                message = self.consumer.receive(30_000)
            except Exception:
                return  # a timeout: the round reports what came
            now = time.time_ns()
            self.lags.append((now - STAMP.unpack_from(message.data())[0]) / 1e6)
            self.last = time.perf_counter()
            self.consumer.acknowledge(message)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else float("nan")


def one_round(clients: dict, rate: int, seconds: float, topic: str) -> dict:
    count = int(rate * seconds)
    consumers = {name: client.subscribe(topic, "bench", receiver_queue_size=10_000) for name, client in clients.items()}
    receivers = {name: Receiver(consumer, count) for name, consumer in consumers.items()}
    producer = clients["east"].create_producer(topic, **producer_options(True))
    per_tick = max(1, int(rate * TICK))
    sent = 0
    started = time.perf_counter()
    while sent < count:
        for _ in range(min(per_tick, count - sent)):
            producer.send_async(STAMP.pack(time.time_ns()) + PAYLOAD_PAD, None)
            sent += 1
        ahead = started + sent / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
    producer.flush()
    produced_s = time.perf_counter() - started
    for receiver in receivers.values():
        receiver.thread.join(120)
    producer.close()
    for consumer in consumers.values():
        consumer.close()
    east, west = receivers["east"], receivers["west"]
    return {
        "target_msg_s": rate, "messages": count, "produced_msg_s": round(count / produced_s),
        "west_received": len(west.lags), "east_received": len(east.lags),
        "west_msg_s": round(len(west.lags) / (west.last - started)) if west.lags else 0,
        "east_lag_ms": {"p50": percentile(east.lags, 0.5), "p99": percentile(east.lags, 0.99)},
        "west_lag_ms": {"p50": percentile(west.lags, 0.5), "p99": percentile(west.lags, 0.99)},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="10000,100000", help="target msg/s, comma separated")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as tmp:
        east = start_standalone(Path(tmp) / "east", ["clusterName=east"])
        west = start_standalone(Path(tmp) / "west", ["clusterName=west"])
        try:
            link(east, west)
            clients = {"east": official_client(east.url), "west": official_client(west.url)}
            rounds = []
            for number in range(args.rounds):
                order = rates if number % 2 == 0 else list(reversed(rates))
                rounds += [{"round": number + 1, **one_round(clients, rate, args.seconds,
                                                             f"persistent://public/default/bench-{number}-{rate}")}
                           for rate in order]
            for client in clients.values():
                client.close()
        finally:
            east.stop()
            west.stop()
    summary = {}
    for rate in rates:
        mine = [r for r in rounds if r["target_msg_s"] == rate]
        west_p50 = statistics.median(r["west_lag_ms"]["p50"] for r in mine)
        east_p50 = statistics.median(r["east_lag_ms"]["p50"] for r in mine)
        summary[str(rate)] = {
            "produced_msg_s": statistics.median(r["produced_msg_s"] for r in mine),
            "west_msg_s": statistics.median(r["west_msg_s"] for r in mine),
            "west_lag_p50_ms": west_p50, "west_lag_p99_ms": statistics.median(r["west_lag_ms"]["p99"] for r in mine),
            "east_lag_p50_ms": east_p50, "east_lag_p99_ms": statistics.median(r["east_lag_ms"]["p99"] for r in mine),
            "all_replicated": all(r["west_received"] == r["messages"] for r in mine),
            "west_over_east_p50": round(west_p50 / east_p50, 2) if east_p50 else None,
        }
    print(json.dumps({"load_average": os.getloadavg(), "seconds": args.seconds, "rounds": rounds,
                      "summary": summary}))


if __name__ == "__main__":
    sys.exit(main())
