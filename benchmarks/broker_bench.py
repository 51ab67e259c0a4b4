"""Broker throughput, latency, start-up and footprint with the official client.

    .venv/bin/python benchmarks/broker_bench.py [--quick] [--profile DIR]

Starts a real `magnetar standalone` (as the integration tests do), one topic per
workload, 100-byte messages, and prints ONE JSON object:

- produce, batched (1000 msgs / 10 ms) and unbatched (pipelined send_async): msg/s;
- the same with several producer processes in parallel, to load the broker harder
  than one Python client can;
- publish latency p50/p99/max (send_async to callback) at a fixed 10,000 msg/s;
- consume (Exclusive, receiver_queue_size 10000) of the batched topic: msg/s and
  the consume/produce ratio of this run;
- start-up time (process start to the "accepting connections" line) and idle RSS.

Every workload reports the CPU the broker and the client processes used over its
wall time (100% = one core), which says who the bottleneck was. Clients run in
their own processes. With --profile DIR, py-spy samples the broker during each
workload (raw collapsed stacks in DIR) and the JSON gets the top functions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pulsar
from _broker_process import PAYLOAD, Standalone, cpu_seconds, official_client, rss_mb


# ---------------------------------------------------------------- client workloads (own processes)
def produce(url: str, topic: str, seconds: float, batched: bool, ready, go, out) -> None:
    client = official_client(url)
    kwargs = dict(batching_enabled=batched, max_pending_messages=20000, block_if_queue_full=True,
                  send_timeout_millis=60000)
    if batched:
        kwargs.update(batching_max_messages=1000, batching_max_publish_delay_ms=10,
                      batching_max_allowed_size_in_bytes=1024 * 1024)
    producer = client.create_producer(topic, **kwargs)
    producer.send(PAYLOAD)  # warm: connection, lookup, producer
    ready.put(True)
    go.wait()
    cpu0, t0 = time.process_time(), time.perf_counter()
    deadline = t0 + seconds
    sent = 0
    while True:
        for _ in range(1000):
            producer.send_async(PAYLOAD, None)  # a Python callback each would cost the client ~3x
        sent += 1000
        if time.perf_counter() >= deadline:
            break
    producer.flush()
    elapsed = time.perf_counter() - t0
    out.put({"sent": sent, "seconds": elapsed, "client_cpu_s": time.process_time() - cpu0})
    client.close()


def latency(url: str, topic: str, seconds: float, rate: int, batched: bool, ready, go, out) -> None:
    client = official_client(url)
    producer = client.create_producer(topic, batching_enabled=batched, batching_max_publish_delay_ms=1,
                                      max_pending_messages=50000, block_if_queue_full=True)
    producer.send(PAYLOAD)
    lat: list[float] = []
    perf = time.perf_counter

    def make_cb(t_send: float):
        return lambda _res, _id: lat.append(perf() - t_send)

    ready.put(True)
    go.wait()
    t0 = perf()
    total = int(seconds * rate)
    per_tick = rate // 1000
    sent = 0
    tick = 0
    while sent < total:
        # 1 ms ticks of rate/1000 sends, sleeping in between: a busy-wait pacer
        # would hold the GIL and delay the client's callback thread, which then
        # shows up as (false) publish latency.
        target = t0 + tick / 1000
        now = perf()
        if target > now:
            time.sleep(target - now)
        for _ in range(per_tick):
            producer.send_async(PAYLOAD, make_cb(perf()))
        sent += per_tick
        tick += 1
    producer.flush()
    deadline = perf() + 30
    while len(lat) < total and perf() < deadline:
        time.sleep(0.01)
    lat.sort()
    out.put({"messages": len(lat), "achieved_rate": round(total / (perf() - t0)),
             "p50_ms": round(lat[len(lat) // 2] * 1000, 3),
             "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 3),
             "max_ms": round(lat[-1] * 1000, 3)})
    client.close()


def consume(url: str, topic: str, count: int, seconds: float, ready, go, out) -> None:
    client = official_client(url)
    ready.put(True)
    go.wait()
    cpu0, t0 = time.process_time(), time.perf_counter()
    consumer = client.subscribe(topic, f"bench-{os.getpid()}", consumer_type=pulsar.ConsumerType.Exclusive,
                                initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=10000)
    deadline = t0 + seconds
    got = 0
    msg = None
    while got < count and time.perf_counter() < deadline:
        try:
            msg = consumer.receive(timeout_millis=2000)
        except pulsar.Timeout:
            break
        got += 1
        if got % 1000 == 0:
            consumer.acknowledge_cumulative(msg)
    elapsed = time.perf_counter() - t0
    if msg is not None:
        consumer.acknowledge_cumulative(msg)
    out.put({"received": got, "seconds": elapsed, "client_cpu_s": time.process_time() - cpu0})
    client.close()


# ---------------------------------------------------------------- orchestration
class Profiler:
    def __init__(self, pid: int, directory: Path | None) -> None:
        self.pid, self.directory = pid, directory
        self.proc: subprocess.Popen | None = None
        self.path: Path | None = None

    def start(self, name: str) -> None:
        if self.directory is None:
            return
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.path = self.directory / f"{name}.txt"
        self.proc = subprocess.Popen([py_spy, "record", "--pid", str(self.pid), "--format", "raw", "--rate", "250",
                                      "--nonblocking", "-o", str(self.path)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(30)
        self.proc = None
        return summarise_profile(self.path) if self.path and self.path.exists() else None


def _frame_name(frame: str) -> str:
    """'handle_send (magnetar/broker/connection.py:270)' -> 'connection.py:handle_send'."""
    func, _, where = frame.partition(" (")
    return f"{Path(where.split(':')[0]).name}:{func}" if where else func


def summarise_profile(path: Path, top: int = 12) -> dict:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if f]
        total += count
        if frames:
            own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    pct = lambda c: round(100 * c / total, 1)  # noqa: E731
    return {"samples": total,
            "self_pct": {name: pct(c) for name, c in own.most_common(top)},
            "inclusive_pct": {name: pct(c) for name, c in inclusive.most_common(top + 8)}}


def run_clients(broker: Standalone, target, args_list: list[tuple], profiler: Profiler, name: str) -> dict:
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(broker.url, *args, ready, go, out)) for args in args_list]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.get(timeout=60)
    pid = broker.proc.pid
    profiler.start(name)
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    go.set()
    results = [out.get(timeout=300) for _ in procs]
    wall = time.perf_counter() - t0
    broker_cpu = cpu_seconds(pid) - cpu0
    profile = profiler.stop()
    for proc in procs:
        proc.join(60)
    summary = {"clients": len(procs), "wall_s": round(wall, 2), "broker_cpu_pct": round(100 * broker_cpu / wall),
               "results": results}
    messages = sum(r.get("sent", r.get("received", r.get("messages", 0))) for r in results)
    if messages:  # CPU per message is steadier than msg/s on a shared machine
        summary["broker_cpu_us_per_msg"] = round(1e6 * broker_cpu / messages, 2)
    if "client_cpu_s" in results[0]:
        summary["client_cpu_pct"] = [round(100 * r["client_cpu_s"] / r["seconds"]) for r in results]
    if profile:
        summary["profile"] = profile
    return summary


def throughput(summary: dict, key: str) -> int:
    """Aggregate msg/s: all messages over the longest client's time."""
    results = summary["results"]
    return round(sum(r[key] for r in results) / max(r["seconds"] for r in results))


def startup(work: Path, runs: int) -> dict:
    times, rss = [], []
    for i in range(runs):
        broker = Standalone(work / f"startup-{i}")
        t0 = time.perf_counter()
        broker.start()
        times.append(time.perf_counter() - t0)
        deadline = time.monotonic() + 1.0  # let start-up garbage settle, then read RSS
        while time.monotonic() < deadline:
            time.sleep(0.1)
        rss.append(rss_mb(broker.proc.pid))
        broker.stop()
    times.sort()
    return {"runs": runs, "startup_s_median": round(times[len(times) // 2], 3),
            "startup_s_all": [round(t, 3) for t in times], "idle_rss_mb": round(sorted(rss)[len(rss) // 2], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run (~40 s)")
    parser.add_argument("--profile", type=Path, help="py-spy the broker in each workload; raw stacks go here")
    parser.add_argument("--parallel", type=int, default=2, help="producer processes for the parallel runs")
    args = parser.parse_args()
    secs = 2.0 if args.quick else 6.0
    lat_secs = 2.0 if args.quick else 5.0
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)

    result: dict = {"python": platform.python_version(), "cpus": os.cpu_count(), "quick": args.quick,
                    "payload_bytes": len(PAYLOAD), "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-") as tmp:
        work = Path(tmp)
        result["startup"] = startup(work, 3 if args.quick else 5)
        broker = Standalone(work / "data").start()
        profiler = Profiler(broker.proc.pid, args.profile)
        try:
            batched = run_clients(broker, produce, [("batched", secs, True)], profiler, "produce_batched")
            unbatched = run_clients(broker, produce, [("unbatched", secs, False)], profiler, "produce_unbatched")
            n = args.parallel
            par_batched = run_clients(broker, produce, [("par-batched", secs, True)] * n, profiler,
                                      "produce_batched_parallel")
            par_unbatched = run_clients(broker, produce, [("par-unbatched", secs, False)] * n, profiler,
                                        "produce_unbatched_parallel")
            lat_single = run_clients(broker, latency, [("latency", lat_secs, 10_000, False)], profiler, "latency")
            lat_batched = run_clients(broker, latency, [("latency-b", lat_secs, 10_000, True)], profiler,
                                      "latency_batched")
            stored = batched["results"][0]["sent"]
            consumed = run_clients(broker, consume, [("batched", stored, 60.0)], profiler, "consume")
            result["broker_rss_mb_after_load"] = round(rss_mb(broker.proc.pid), 1)
        finally:
            with contextlib.suppress(Exception):
                broker.stop()
    produce_b = throughput(batched, "sent")
    consume_rate = throughput(consumed, "received")
    result.update({
        "produce_batched_msg_s": produce_b,
        "produce_unbatched_msg_s": throughput(unbatched, "sent"),
        f"produce_batched_{n}procs_msg_s": throughput(par_batched, "sent"),
        f"produce_unbatched_{n}procs_msg_s": throughput(par_unbatched, "sent"),
        "consume_msg_s": consume_rate,
        "consume_over_produce_batched": round(consume_rate / produce_b, 2),
        "consume_got_everything": consumed["results"][0]["received"] == stored,
        "publish_latency_unbatched_10k": lat_single["results"][0],
        "publish_latency_batched_1ms_10k": lat_batched["results"][0],
        "detail": {"produce_batched": batched, "produce_unbatched": unbatched,
                   "produce_batched_parallel": par_batched, "produce_unbatched_parallel": par_unbatched,
                   "latency_unbatched": lat_single, "latency_batched": lat_batched, "consume": consumed},
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    })
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
