"""Broker CPU per unbatched message published, delivered and acknowledged, official client.

    .venv/bin/python benchmarks/consume_cpu_bench.py [--messages N] [--rounds R] [--rate R]
        [--trees before=/other/checkout/src,after=src]

The event loop's busy time is what delays every SEND's handling, and at 10,000 msg/s the
consumer side (dispatch of one-message entries, ACKs of many ids) costs the loop about as
much as publishing. This measures the broker's CPU time (all its threads, from /proc),
which load on the machine inflates far less than wall time. Per round and tree, a fresh
`magnetar standalone` running that tree's code, then, each figure in microseconds per
message of N 100-byte ones:

  publish_only              an unbatched producer sending at --rate (open loop), no consumer
                            (the subscription exists, so every message is kept)
  backlog_consume_ack       one official-client consumer (Exclusive, default options: ack
                            grouping on, so one ACK carries many ids) receiving and
                            acknowledging those N, until the backlog reads 0 on the admin API
  live_publish_consume_ack  the producer at --rate with such a consumer attached to another
                            topic meanwhile, until its backlog reads 0

The first and last depend on how many messages each loop turn and group commit gathers, so
on timing: they vary with load far more than the backlog figure does.
Trees alternate which goes first round by round. Prints one JSON document: per tree the
rounds' figures and their medians, and the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker_process import Standalone, cpu_seconds, official_client, producer_options

TOPIC = "persistent://public/default/consume-cpu"
SUBSCRIPTION = "bench"
PAYLOAD = b"x" * 100


def _backlog(admin_url: str, topic: str) -> int:
    url = f"{admin_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/stats"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return int(json.load(answer)["subscriptions"][SUBSCRIPTION]["msgBacklog"])


def _wait_backlog_empty(admin_url: str, topic: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while _backlog(admin_url, topic) != 0:
        if time.monotonic() > deadline:
            raise TimeoutError("acknowledgements did not reach the broker")
        time.sleep(0.01)


def _consume(client: pulsar.Client, topic: str, count: int) -> None:
    consumer = client.subscribe(topic, SUBSCRIPTION, consumer_type=pulsar.ConsumerType.Exclusive,
                                initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(count):
        consumer.acknowledge(consumer.receive(60_000))
    consumer.close()


def _paced_send(client: pulsar.Client, topic: str, count: int, rate: int) -> None:
    """Open loop at `rate` msg/s (sends due are caught up each millisecond), then the last receipt."""
    producer = client.create_producer(topic, **producer_options(batched=False))
    done = threading.Event()
    left = [count]

    def receipt(_result: pulsar.Result, _msg_id: object) -> None:
        left[0] -= 1
        if left[0] == 0:
            done.set()

    t0 = time.perf_counter()
    for sent in range(count):
        pause = t0 + sent / rate - time.perf_counter()
        if pause > 0.001:
            time.sleep(pause)
        producer.send_async(PAYLOAD, receipt)
    if not done.wait(120):
        raise TimeoutError("receipts missing")
    producer.close()


def one_round(src: str, count: int, rate: int) -> dict[str, float]:
    """The broker's CPU microseconds per message on three paths (see the module's docstring)."""
    data = Path(tempfile.mkdtemp(prefix="consume-cpu-"))
    broker = Standalone(data / "broker", env={"PYTHONPATH": src}).start()
    assert broker.proc is not None
    pid = broker.proc.pid
    try:
        client = official_client(broker.url)
        try:
            stored, live = f"{TOPIC}-stored", f"{TOPIC}-live"
            client.subscribe(stored, SUBSCRIPTION).close()  # the subscription holds every message
            cpu0 = cpu_seconds(pid)
            _paced_send(client, stored, count, rate)
            publish_cpu = cpu_seconds(pid) - cpu0
            cpu0 = cpu_seconds(pid)
            _consume(client, stored, count)
            _wait_backlog_empty(broker.admin_url, stored)
            backlog_cpu = cpu_seconds(pid) - cpu0
            client.subscribe(live, SUBSCRIPTION).close()
            reader = threading.Thread(target=_consume, args=(client, live, count))
            cpu0 = cpu_seconds(pid)
            reader.start()
            _paced_send(client, live, count, rate)
            reader.join()
            _wait_backlog_empty(broker.admin_url, live)
            live_cpu = cpu_seconds(pid) - cpu0
        finally:
            client.close()
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    per = 1e6 / count
    return {"publish_only": publish_cpu * per, "backlog_consume_ack": backlog_cpu * per,
            "live_publish_consume_ack": live_cpu * per}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10_000, help="messages per second the producer sends")
    parser.add_argument("--trees", default=f"this={Path(__file__).resolve().parent.parent / 'src'}",
                        help="name=path/to/src,...: the magnetar each broker runs")
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.trees.split(","))
    load_before = os.getloadavg()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    names = list(trees)
    for round_number in range(args.rounds):
        order = names if round_number % 2 == 0 else names[::-1]
        for name in order:
            results[name].append(one_round(trees[name], args.messages, args.rate))
    summary = {
        name: {
            "rounds": [{key: round(value, 1) for key, value in r.items()} for r in runs],
            "median_us_per_msg": {key: round(statistics.median(r[key] for r in runs), 1) for key in runs[0]},
        }
        for name, runs in results.items()
    }
    print(json.dumps({"messages": args.messages, "rate": args.rate, "rounds": args.rounds, "trees": trees,
                      "results": summary,
                      "loadavg_before": load_before, "loadavg_after": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    main()
