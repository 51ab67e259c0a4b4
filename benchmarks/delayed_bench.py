"""Delayed delivery (PIP-26): tracker memory, restart and resume, produce ratio, lateness.

    .venv/bin/python benchmarks/delayed_bench.py [--quick]

Prints ONE JSON object:

- trackers: each tracker driven in-process (its own child process, so RSS is its
  own) with N delayed messages spread uniformly over 24 h on consecutive
  positions (ledgers of 50,000 entries): RSS growth and bytes per message after
  adding, and again once the clock moved and the nearest buckets are loaded;
  add rate; for the bucket tracker, recovery time from its snapshots.
  N = 10,000,000 (the issue's case); --quick: 1,000,000.
- end_to_end, a real `magnetar standalone` with the official client:
  - produce: unbatched pipelined send_async to a topic with a Shared consumer
    attached (so the broker reads and tracks what it stores), immediate vs
    deliver_after 1 h, three alternating rounds; median msg/s and the ratio;
  - restart: M messages pending (half due 4 s after sending, half in 1 h), broker
    stopped, restarted once the first half is due: ready time, time to the first
    and to the last due message, and that nothing not yet due came out; per tracker;
  - lateness (arrival - deliver_at) p50/p99/max at a target 10,000 msg/s of
    messages delayed 1-2 s, with tick 1000 ms and tick 10 ms; achieved rate and
    early deliveries (must be 0) reported.
  M = 100,000; --quick: 20,000.
Load average and CPU count are reported: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pulsar

from magnetar.broker.delayed_delivery.bucket import BucketDelayedDeliveryTracker
from magnetar.broker.delayed_delivery.tracker import InMemoryDelayedDeliveryTracker
from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory, Position

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

DAY_MS = 86_400_000
ENTRIES_PER_LEDGER = 50_000
BUCKET = "org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
IN_MEMORY = "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
KINDS = {"bucket": BUCKET, "in-memory": IN_MEMORY}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def rss_bytes(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# ------------------------------------------------------------------ trackers in-process
def tracker_child(kind: str, count: int) -> dict[str, object]:
    """Runs in its own process (see main): RSS growth belongs to this tracker alone."""
    data = Path(tempfile.mkdtemp(prefix="delayed-bench-"))
    try:
        factory = ManagedLedgerFactory(data, ManagedLedgerConfig(sync_data=False))
        ledger = factory.open("public/default/persistent/bench")
        cursor = ledger.open_cursor("sub")
        start = now_ms()
        clock_now = [start]

        def clock() -> int:
            return clock_now[0]

        def make() -> object:
            if kind == "in-memory":
                return InMemoryDelayedDeliveryTracker(1000, True, clock=clock)
            return BucketDelayedDeliveryTracker(
                factory.metadata_store, cursor, ledger.name, tick_ms=1000, strict=True,
                bucket_ms=300_000, flush_threshold=50_000, clock=clock)

        rng = random.Random(7)
        times = [start + 1 + int(rng.random() * DAY_MS) for _ in range(min(count, 1_000_000))]
        tracker = make()
        before = rss_bytes()
        began = time.perf_counter()
        for i in range(count):
            tracker.add(Position(1 + i // ENTRIES_PER_LEDGER, i % ENTRIES_PER_LEDGER), times[i % len(times)])
        add_s = time.perf_counter() - began
        after_add = rss_bytes()
        clock_now[0] = start + 600_000  # ten minutes on: the first buckets are due and loaded
        popped = len(tracker.pop_due(1_000_000))
        after_near = rss_bytes()
        result: dict[str, object] = {
            "messages": count,
            "add_per_s": round(count / add_s),
            "rss_growth_mb": round((after_add - before) / 2**20, 1),
            "bytes_per_message": round((after_add - before) / count, 2),
            "rss_growth_mb_near_buckets_loaded": round((after_near - before) / 2**20, 1),
            "bytes_per_message_near_buckets_loaded": round((after_near - before) / count, 2),
            "popped_first_10_min": popped,
        }
        if kind == "bucket":
            tracker.flush()
            began = time.perf_counter()
            recovered = make()
            result["recover_s"] = round(time.perf_counter() - began, 3)
            result["recovered_messages"] = len(recovered)
            began = time.perf_counter()
            clock_now[0] += 1000
            recovered.pop_due(1000)
            result["recovered_first_pop_s"] = round(time.perf_counter() - began, 3)
            result["storage_mb"] = round((data / "metadata.db").stat().st_size / 2**20, 1)
        factory.close()
        return result
    finally:
        shutil.rmtree(data, ignore_errors=True)


def run_tracker(kind: str, count: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, __file__, "--tracker-child", kind, str(count)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


# ------------------------------------------------------------------ end to end
def broker_config(kind: str, tick_ms: int = 1000) -> list[str]:
    return [f"delayedDeliveryTrackerFactoryClassName={KINDS[kind]}", f"delayedDeliveryTickTimeMillis={tick_ms}"]


def produce(client: pulsar.Client, topic: str, count: int, delay: timedelta | None,
            at: list[int] | None = None) -> float:
    """Pipelined unbatched send_async; msg/s until the last receipt."""
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=10_000,
                                      block_if_queue_full=True)
    began = time.perf_counter()
    for i in range(count):
        if at is not None:
            producer.send_async(b"x" * 100, None, deliver_at=at[i])
        elif delay is not None:
            producer.send_async(b"x" * 100, None, deliver_after=delay)
        else:
            producer.send_async(b"x" * 100, None)
    producer.flush()
    rate = count / (time.perf_counter() - began)
    producer.close()
    return rate


def bench_produce(tmp: Path, count: int, rounds: int = 3) -> dict[str, object]:
    """Alternating rounds, medians: the machine is shared, one pair of runs is noise."""
    broker = Standalone(tmp / "produce", broker_config("bucket")).start()
    rates: dict[str, list[float]] = {"immediate": [], "delayed": []}
    try:
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        for round_ in range(rounds):
            for name, delay in (("immediate", None), ("delayed", timedelta(hours=1))):
                topic = f"produce-{name}-{round_}"
                client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=1)
                rates[name].append(produce(client, topic, count, delay))
        client.close()
    finally:
        broker.stop()
    immediate, delayed = percentile(rates["immediate"], 0.5), percentile(rates["delayed"], 0.5)
    return {"messages": count, "rounds": rounds, "immediate_msg_per_s": round(immediate),
            "delayed_msg_per_s": round(delayed), "delayed_over_immediate": round(delayed / immediate, 3)}


def bench_restart(tmp: Path, kind: str, count: int) -> dict[str, object]:
    broker = Standalone(tmp / f"restart-{kind}", broker_config(kind)).start()
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    client.subscribe("restart", "sub", consumer_type=pulsar.ConsumerType.Shared).close()
    began = now_ms()
    soon = began + 4000
    at = [soon if i % 2 == 0 else began + 3_600_000 for i in range(count)]
    produce(client, "restart", count, None, at)
    soon = max(soon, now_ms())
    client.close()
    broker.stop()
    time.sleep(max(0.0, (soon - now_ms()) / 1000))
    restarted = time.perf_counter()
    broker.start()
    ready = time.perf_counter() - restarted
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe("restart", "sub", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=1000)
    due = count - count // 2
    first = None
    received = 0
    deadline = time.monotonic() + 120
    while received < due and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        first = first if first is not None else time.perf_counter() - restarted
        received += 1
        consumer.acknowledge(msg)
    drained = time.perf_counter() - restarted
    extra = 0
    try:
        while True:
            consumer.receive(timeout_millis=1000)
            extra += 1
    except pulsar.Timeout:
        pass
    client.close()
    broker.stop()
    return {"pending": count, "due_at_restart": due, "ready_s": round(ready, 2),
            "first_message_s": round(first, 2) if first is not None else None,
            "all_due_delivered_s": round(drained, 2), "due_received": received,
            "not_yet_due_delivered": extra}


def lateness_consumer(url: str, topic: str, expected: int, queue: mp.Queue) -> None:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared,
                                receiver_queue_size=10_000)
    queue.put("ready")
    late: list[int] = []
    deadline = time.monotonic() + 120
    while len(late) < expected and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=1000)
        except pulsar.Timeout:
            continue
        late.append(now_ms() - int(msg.properties()["at"]))
        consumer.acknowledge(msg)
    client.close()
    queue.put(late)


def bench_lateness(tmp: Path, tick_ms: int, seconds: float, rate: int = 10_000) -> dict[str, object]:
    broker = Standalone(tmp / f"late-{tick_ms}", broker_config("bucket", tick_ms)).start()
    expected = int(seconds * rate)
    queue: mp.Queue = mp.get_context("spawn").Queue()
    reader = mp.get_context("spawn").Process(target=lateness_consumer, args=(broker.url, "late", expected, queue))
    reader.start()
    assert queue.get(timeout=60) == "ready"
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer("late", batching_enabled=False, max_pending_messages=20_000,
                                      block_if_queue_full=True)
    rng = random.Random(3)
    began = time.perf_counter()
    for i in range(expected):
        target = began + i / rate
        pause = target - time.perf_counter()
        if pause > 0.001:
            time.sleep(pause)
        at = now_ms() + 1000 + rng.randrange(1000)
        producer.send_async(b"x" * 100, None, properties={"at": str(at)}, deliver_at=at)
    producer.flush()
    achieved = expected / (time.perf_counter() - began)
    late = queue.get(timeout=180)
    reader.join(30)
    client.close()
    broker.stop()
    return {"tick_ms": tick_ms, "target_msg_per_s": rate, "achieved_msg_per_s": round(achieved),
            "messages": expected, "received": len(late),
            "lateness_ms_p50": percentile(late, 0.5), "lateness_ms_p99": percentile(late, 0.99),
            "lateness_ms_max": max(late) if late else None, "early": sum(1 for v in late if v < 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tracker-child", nargs=2, metavar=("KIND", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tracker_child:
        print(json.dumps(tracker_child(args.tracker_child[0], int(args.tracker_child[1]))))
        return
    tracked = 1_000_000 if args.quick else 10_000_000
    e2e = 20_000 if args.quick else 100_000
    seconds = 2 if args.quick else 5
    result: dict[str, object] = {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}
    result["trackers"] = {kind: run_tracker(kind, tracked) for kind in ("bucket", "in-memory")}
    tmp = Path(tempfile.mkdtemp(prefix="delayed-e2e-"))
    try:
        result["produce"] = bench_produce(tmp, e2e)
        result["restart"] = {kind: bench_restart(tmp, kind, e2e) for kind in ("bucket", "in-memory")}
        result["lateness"] = [bench_lateness(tmp, tick, seconds) for tick in (1000, 10)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["loadavg_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
