"""magnetar.client against the official pulsar-client, side by side, in one run.

    .venv/bin/python benchmarks/client_bench.py [--quick] [--messages N] [--profile DIR]

Starts one `magnetar standalone` and runs every workload once per client, each run in its
own process (so one client's threads and memory never weigh on the other), alternating
which client goes first. 100-byte messages. Prints ONE JSON object with, per workload and
client, msg/s and the client process's CPU seconds per million messages, and the ratio
magnetar / official:

- produce_batched: send_async with a Python callback per message (it counts), batching on
  (1000 messages / 128 KiB / 10 ms), block_if_queue_full=True (the official default False
  drops messages silently once 1000 are pending), max_pending_messages 10000; the official
  client also with callback=None, to show what the callback costs it;
- produce_unbatched: the same without batching;
- consume: Exclusive, receive() then acknowledge() per message, of a topic filled with
  batches beforehand (each client reads its own copy).

With --profile DIR, py-spy records the magnetar runs (flame graphs in DIR).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

PAYLOAD = b"x" * 100
CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu() -> float:
    """CPU seconds of this process, all threads (the official client's C++ too), to the ns."""
    return time.process_time()


def make_client(kind: str, url: str) -> Any:
    if kind == "official":
        import pulsar  # noqa: PLC0415

        return pulsar.Client(url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    from magnetar.client import Client  # noqa: PLC0415

    return Client(url, operation_timeout_seconds=30)


def run_produce(kind: str, url: str, topic: str, count: int, batched: bool, with_callback: bool) -> dict:
    client = make_client(kind, url)
    producer = client.create_producer(
        topic, batching_enabled=batched, batching_max_messages=1000, batching_max_publish_delay_ms=10,
        block_if_queue_full=True, max_pending_messages=10000, send_timeout_millis=120_000)
    done = [0]
    failed = [0]

    def callback(result: Any, _message_id: Any) -> None:
        done[0] += 1
        if int(result) != 0:
            failed[0] += 1

    producer.send(PAYLOAD)  # connection and first round trip outside the timing
    cpu0, t0 = process_cpu(), time.perf_counter()
    send_async = producer.send_async
    if with_callback:
        for _ in range(count):
            send_async(PAYLOAD, callback)
    else:
        for _ in range(count):
            send_async(PAYLOAD, None)
    producer.flush()
    wall, cpu = time.perf_counter() - t0, process_cpu() - cpu0
    client.close()
    if with_callback and (done[0] != count or failed[0]):
        raise RuntimeError(f"{kind}: {done[0]} callbacks, {failed[0]} failed, of {count}")
    return {"msg_per_s": round(count / wall), "cpu_s_per_million": round(cpu / count * 1e6, 2),
            "wall_s": round(wall, 3)}


def fill(url: str, topic: str, count: int, batched: bool = True) -> None:
    client = make_client("official", url)
    producer = client.create_producer(topic, batching_enabled=batched, batching_max_messages=1000,
                                      block_if_queue_full=True, max_pending_messages=10000)
    for _ in range(count):
        producer.send_async(PAYLOAD, None)
    producer.flush()
    client.close()


def run_consume(kind: str, url: str, topic: str, count: int, subscription: str = "bench") -> dict:
    client = make_client(kind, url)
    if kind == "official":
        import pulsar as module  # noqa: PLC0415
    else:
        import magnetar.client as module  # noqa: PLC0415
    consumer = client.subscribe(topic, subscription, consumer_type=module.ConsumerType.Exclusive,
                                initial_position=module.InitialPosition.Earliest)
    consumer.acknowledge(consumer.receive(30_000))
    cpu0, t0 = process_cpu(), time.perf_counter()
    receive, acknowledge = consumer.receive, consumer.acknowledge
    for _ in range(count - 1):
        acknowledge(receive(30_000))
    wall, cpu = time.perf_counter() - t0, process_cpu() - cpu0
    client.close()
    return {"msg_per_s": round((count - 1) / wall), "cpu_s_per_million": round(cpu / (count - 1) * 1e6, 2),
            "wall_s": round(wall, 3)}


def _child(queue: mp.Queue, fn: str | Any, args: tuple) -> None:
    """Run `fn` (a function of this module by name, or any picklable function) in a child."""
    try:
        queue.put(("ok", (fn if callable(fn) else globals()[fn])(*args)))
    except BaseException as exc:
        queue.put(("error", repr(exc)))


def spy_on(profile: Path | None, label: str, pid: int) -> subprocess.Popen | None:
    """py-spy recording process `pid` into DIR/label.svg until it ends (None without --profile)."""
    if profile is None or not shutil.which("py-spy"):
        return None
    profile.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(["py-spy", "record", "--threads", "--nonblocking", "-o", str(profile / f"{label}.svg"),
                             "--pid", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def outcome(queue: mp.Queue, proc: Any, spy: subprocess.Popen | None, what: str) -> dict:
    """What a child put on `queue` last, once it ended (and its py-spy); RuntimeError if it failed."""
    status, result = queue.get(timeout=900)
    proc.join(60)
    if spy is not None:
        spy.wait(30)
    if status != "ok":
        raise RuntimeError(f"{what}: {result}")
    return result


def in_process(fn: str | Any, *args: Any, profile: Path | None = None, label: str = "") -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, fn, args))
    proc.start()
    return outcome(queue, proc, spy_on(profile, label, proc.pid), f"{fn}{args[:1]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args()
    batched_n = args.messages or (20_000 if args.quick else 200_000)
    unbatched_n = max(batched_n // 4, 1000)
    data = Path(tempfile.mkdtemp(prefix="client-bench-"))
    broker = Standalone(data / "data", ["journalSyncData=false"]).start()
    results: dict[str, Any] = {}
    try:
        order = ["official", "magnetar"]
        workloads: dict[str, dict[str, Any]] = {"produce_batched": {}, "produce_unbatched": {}, "consume": {}}
        for round_ in range(2):
            kinds = order if round_ == 0 else order[::-1]
            for kind in kinds:
                def topic() -> str:
                    return f"persistent://public/default/bench-{uuid.uuid4().hex[:8]}"

                if round_ == 0:
                    workloads["produce_batched"][kind] = in_process(
                        "run_produce", kind, broker.url, topic(), batched_n, True, True,
                        profile=args.profile if kind == "magnetar" else None, label="produce_batched")
                    if kind == "official":
                        workloads["produce_batched"]["official_no_callback"] = in_process(
                            "run_produce", kind, broker.url, topic(), batched_n, True, False)
                else:
                    workloads["produce_unbatched"][kind] = in_process(
                        "run_produce", kind, broker.url, topic(), unbatched_n, False, True,
                        profile=args.profile if kind == "magnetar" else None, label="produce_unbatched")
                    name = topic()
                    fill(broker.url, name, batched_n)
                    workloads["consume"][kind] = in_process(
                        "run_consume", kind, broker.url, name, batched_n,
                        profile=args.profile if kind == "magnetar" else None, label="consume")
        for runs in workloads.values():
            ours, theirs = runs["magnetar"], runs["official"]
            runs["ratio_msg_per_s"] = round(ours["msg_per_s"] / theirs["msg_per_s"], 2)
            runs["ratio_cpu_per_message"] = round(ours["cpu_s_per_million"] / theirs["cpu_s_per_million"], 2)
        results = {
            "messages": {"batched": batched_n, "unbatched": unbatched_n, "payload_bytes": len(PAYLOAD)},
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            **workloads,
        }
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
