"""magnetar.client's consumer paths per message: receive + acknowledge, blocking and asyncio.

    .venv/bin/python benchmarks/consumer_paths_bench.py [--messages N] [--runs R] [--paths a,b]
        [--trees old=/other/checkout/src,new=src]

Starts one `magnetar standalone`, fills a topic with N 100-byte messages in batches of 1000
and another with N/4 unbatched ones, then runs each path R times, each run in a fresh process
with its own subscription (Earliest), and measures that process's CPU (all its threads) and
wall time from the second message to the last:

  blocking_receive_ack            magnetar.client: receive() then acknowledge(), batched topic
  blocking_receive_ack_unbatched  the same on the unbatched topic (one entry per message)
  aio_receive_ack                 magnetar.client.aio: await receive() then acknowledge()
  aio_async_for_ack               magnetar.client.aio: async for, acknowledge()
  aio_receive_ack_unbatched       aio receive() then acknowledge(), unbatched topic

With --trees, every run goes once per tree (alternating which goes first), the child
importing magnetar.client from that tree's src: two checkouts compared in the same minutes
(the broker is this tree's). Prints one JSON document: per path and tree, each run's msg/s
and client CPU seconds per million messages, their medians, and the machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from client_bench import PAYLOAD, fill, process_cpu, run_consume

PATHS = ("blocking_receive_ack", "blocking_receive_ack_unbatched", "aio_receive_ack", "aio_async_for_ack",
         "aio_receive_ack_unbatched")


async def aio_path(url: str, topic: str, count: int, iterate: bool) -> tuple[float, float]:
    from magnetar.client.aio import Client  # noqa: PLC0415
    from magnetar.client.enums import ConsumerType, InitialPosition  # noqa: PLC0415

    async with Client(url) as client:
        consumer = await client.subscribe(topic, f"bench-{uuid.uuid4().hex[:8]}",
                                          consumer_type=ConsumerType.Exclusive,
                                          initial_position=InitialPosition.Earliest)
        consumer.acknowledge(await consumer.receive(30_000))
        cpu0, t0 = process_cpu(), time.perf_counter()
        acknowledge = consumer.acknowledge
        left = count - 1
        if iterate:
            async for message in consumer:
                acknowledge(message)
                left -= 1
                if not left:
                    break
        else:
            receive = consumer.receive
            for _ in range(left):
                acknowledge(await receive())
        return time.perf_counter() - t0, process_cpu() - cpu0


def child(path: str, url: str, topic: str, count: int) -> None:
    if path.startswith("blocking"):
        result = run_consume("magnetar", url, topic, count, subscription=f"bench-{uuid.uuid4().hex[:8]}")
        print(json.dumps([result["msg_per_s"], result["cpu_s_per_million"]]))
        return
    wall, used = asyncio.run(aio_path(url, topic, count, iterate=path == "aio_async_for_ack"))
    print(json.dumps([round((count - 1) / wall), round(used / (count - 1) * 1e6, 3)]))


def run_child(path: str, url: str, topic: str, count: int, src: str | None) -> list[float]:
    """[msg/s, CPU s per million] of one run."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    out = subprocess.run([sys.executable, __file__, "--child", path, url, topic, str(count)], env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    if out.returncode:
        raise RuntimeError(f"{path}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--trees", default=None, help="name=src,name=src: compare checkouts")
    parser.add_argument("--child", nargs=4, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        path, url, topic, count = args.child
        child(path, url, topic, int(count))
        return
    from standalone import Standalone  # noqa: PLC0415

    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(f"--paths: unknown {sorted(unknown)}; known: {', '.join(PATHS)}")
    trees: list[tuple[str, str | None]] = [("this", None)]
    if args.trees:
        trees = [(name, str(Path(src).resolve())) for name, src in (t.split("=", 1) for t in args.trees.split(","))]
    load_before = os.getloadavg()
    data = Path(tempfile.mkdtemp(prefix="consumer-paths-"))
    broker = Standalone(data / "data", ["journalSyncData=false"]).start()
    results: dict[str, Any] = {}
    try:
        batched = f"persistent://public/default/paths-{uuid.uuid4().hex[:8]}"
        unbatched = f"persistent://public/default/paths-{uuid.uuid4().hex[:8]}"
        unbatched_n = max(args.messages // 4, 1000)
        fill(broker.url, batched, args.messages, True)
        fill(broker.url, unbatched, unbatched_n, False)
        for path in paths:
            topic, count = (unbatched, unbatched_n) if path.endswith("unbatched") else (batched, args.messages)
            runs: dict[str, list[list[float]]] = {name: [] for name, _ in trees}
            for index in range(args.runs):
                order = trees if index % 2 == 0 else trees[::-1]
                for name, src in order:
                    runs[name].append(run_child(path, broker.url, topic, count, src))
            results[path] = {name: {
                "runs_msg_per_s_and_cpu_s_per_million": one,
                "median_msg_per_s": statistics.median(r[0] for r in one),
                "median_cpu_s_per_million": statistics.median(r[1] for r in one),
            } for name, one in runs.items()}
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    results["messages"] = {"batched": args.messages, "unbatched": unbatched_n, "payload_bytes": len(PAYLOAD)}
    results["load_1_5_15_min"] = {"before": load_before, "after": os.getloadavg()}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
