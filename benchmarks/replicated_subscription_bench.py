"""Replicated subscriptions (PIP-33): what a failover delivers again, and what the markers cost.

    .venv/bin/python benchmarks/replicated_subscription_bench.py [--rate 500] [--seconds 6] [--rounds 2]
        [--frequencies 1000,200]

Per snapshot frequency (replicatedSubscriptionsSnapshotFrequencyMillis), two `magnetar standalone`
processes, clusters `east` and `west`, replicating public/default both ways. Per round: the
official client produces on east at `--rate` msg/s for `--seconds` (unbatched, so the ledger's
entries count messages and markers apart); a consumer with replicate_subscription_state
acknowledges each message as it comes and stops (is killed, as far as its acknowledgements go)
halfway. Once west's subscription no longer moves, a consumer subscribes there: `redelivered`
is how many of the messages acknowledged on east it gets again (what PIP-33 allows: those
acknowledged after the last snapshot the acknowledgements passed). `markers_per_s_*`: the
entries that are not messages, per second of producing, in each cluster's copy of the topic.
Frequencies alternate within a round. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from _broker_process import official_client, start_standalone
from replication_bench import link

from magnetar.admin_client import AdminClient

SUB = "bench"


def west_position(west, topic: str) -> str | None:
    try:
        return AdminClient(west.admin_url).internal_stats(topic)["cursors"][SUB]["markDeletePosition"]
    except Exception:  # not made there yet
        return None


def settled(west, topic: str, interval: float, deadline: float) -> None:
    """Until west's subscription kept its position for three snapshot intervals."""
    last, since = west_position(west, topic), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(interval / 2)
        now = west_position(west, topic)
        if now != last:
            last, since = now, time.monotonic()
        elif last is not None and time.monotonic() - since > 3 * interval:
            return


def one_round(brokers: dict, clients: dict, rate: int, seconds: float, interval: float) -> dict:
    topic = f"persistent://public/default/rsub-{time.monotonic_ns()}"
    west = brokers["west"]
    consumer = clients["east"].subscribe(topic, SUB, replicate_subscription_state_enabled=True)
    acked: list[int] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            try:
                message = consumer.receive(200)
            except Exception:
                continue
            consumer.acknowledge(message)
            acked.append(int(message.data()))

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    producer = clients["east"].create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    count = int(rate * seconds)
    started = time.perf_counter()
    for i in range(count):
        if i == count // 2:
            stop.set()
            thread.join()
            consumer.close()
        producer.send_async(str(i).encode(), None)
        delay = started + (i + 1) / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    producer.flush()
    produced_for = time.perf_counter() - started
    settled(west, topic, interval, time.monotonic() + 60)
    on_west = clients["west"].subscribe(topic, SUB, replicate_subscription_state_enabled=True)
    first = None
    with contextlib.suppress(Exception):  # nothing came: reported as None
        first = int(on_west.receive(10_000).data())
    on_west.close()
    last_acked = max(acked) if acked else -1
    markers = {}
    for name, broker in brokers.items():
        entries = AdminClient(broker.admin_url).internal_stats(topic)["numberOfEntries"]
        markers[f"markers_per_s_{name}"] = round((entries - count) / produced_for, 1)
    return {"acked": len(acked), "first_on_west": first,
            "redelivered": (last_acked + 1 - first) if first is not None else None, **markers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--frequencies", default="1000,200", help="snapshot frequencies in ms")
    args = parser.parse_args()
    frequencies = [int(f) for f in args.frequencies.split(",")]
    results: dict[str, list[dict]] = {str(f): [] for f in frequencies}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = frequencies if round_ % 2 == 0 else frequencies[::-1]
            for frequency in order:
                config = [f"replicatedSubscriptionsSnapshotFrequencyMillis={frequency}"]
                brokers = {name: start_standalone(Path(tmp) / f"{name}-{frequency}-{round_}",
                                                  [f"clusterName={name}", *config]) for name in ("east", "west")}
                clients = {name: official_client(b.url) for name, b in brokers.items()}
                try:
                    link(brokers["east"], brokers["west"])
                    AdminClient(brokers["west"].admin_url).set_replication_clusters("public/default",
                                                                                    ["east", "west"])
                    results[str(frequency)].append(one_round(brokers, clients, args.rate, args.seconds,
                                                             frequency / 1000))
                finally:
                    for client in clients.values():
                        client.close()
                    for broker in brokers.values():
                        broker.stop()
    medians = {f: {key: statistics.median(r[key] for r in rounds if r[key] is not None)
                   for key in ("redelivered", "markers_per_s_east", "markers_per_s_west")}
               for f, rounds in results.items()}
    json.dump({"rate": args.rate, "seconds": args.seconds, "rounds": results, "medians": medians}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
