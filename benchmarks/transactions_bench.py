"""Transactional produce against plain produce, and commit latency (PIP-31, issue 46).

    .venv/bin/python benchmarks/transactions_bench.py [--messages 20000] [--per-txn 100] [--rounds 3]
                                                      [--in-flight 8]
    .venv/bin/python benchmarks/transactions_bench.py --magnetar before=/work/main/src --magnetar after=src

Starts one `magnetar standalone` with transactionCoordinatorEnabled=true and produces 100-byte
messages with magnetar.client.aio, in alternating rounds on fresh topics:

  plain_batched              send_async() of every message, then flush(), batching on (the
                             official client's default; magnetar.client.aio's is off)
  plain_unbatched            the same, batching off
  transactional_1_in_flight  one producer: `--per-txn` messages a transaction with send_async
                             (batched), flush(), commit(), then the next transaction
  transactional_N_in_flight  the same with `--in-flight` producers on the topic at once, each
                             with its transaction (pulsar-perf's transactional producers):
                             their log writes, batches and markers share commits and fsyncs

Prints one JSON document: per mode the msg/s of each round and their median, the ratio of
each transactional mode to each plain mode, commit latency (from commit() called to answered,
the sends already receipted by the flush) p50/p99 in ms, and the machine's load average
before and after.

`--concurrent-only` runs plain batched and the `--in-flight` mode only, the issue's aim, so
that more rounds fit in the same time.

`--magnetar LABEL=SRC` (repeatable) puts versions side by side in one run: each round runs
once per label, in turns (the order reversed every other round), in a process of its own
with PYTHONPATH=SRC, so both the broker and magnetar.client are that tree's; the document
then holds the figures above per label. Each mode's figures include the CPU-us per message
the broker process and the client (this process, or the label's) spent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path

from _broker_process import PAYLOAD, cpu_seconds, start_standalone

from magnetar.client import aio


async def _plain(client: aio.Client, count: int, batched: bool) -> float:
    producer = await client.create_producer(f"bench-{uuid.uuid4().hex[:8]}", batching_enabled=batched,
                                            max_pending_messages=5000, block_if_queue_full=True)
    start = time.perf_counter()
    for _ in range(count):
        producer.send_async(PAYLOAD, None)
    await producer.flush()
    elapsed = time.perf_counter() - start
    await producer.close()
    return count / elapsed


async def _txn_worker(client: aio.Client, topic: str, groups: int, per_txn: int, commits: list[float]) -> None:
    producer = await client.create_producer(topic, batching_enabled=True, max_pending_messages=5000,
                                            block_if_queue_full=True)
    for _ in range(groups):
        txn = await client.new_transaction(timeout=60)
        for _ in range(per_txn):
            producer.send_async(PAYLOAD, None, txn=txn)
        await producer.flush()
        committing = time.perf_counter()
        await txn.commit()
        commits.append((time.perf_counter() - committing) * 1000)
    await producer.close()


async def _transactional(client: aio.Client, count: int, per_txn: int, in_flight: int, commits: list[float]) -> float:
    """`in_flight` producers on one topic, each committing a transaction of `per_txn` messages
    before it opens the next (pulsar-perf's transactional producers, one each)."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    groups = count // per_txn // in_flight
    start = time.perf_counter()
    await asyncio.gather(*(_txn_worker(client, topic, groups, per_txn, commits) for _ in range(in_flight)))
    return groups * in_flight * per_txn / (time.perf_counter() - start)


def _percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"p50": round(values[len(values) // 2], 2), "p99": round(values[min(len(values) - 1,
                                                                           int(len(values) * 0.99))], 2)}


class _Cpu:
    """CPU seconds the broker process and this one spent, summed per mode."""

    def __init__(self, broker_pid: int) -> None:
        self.pid = broker_pid
        self.spent: dict[str, list[float]] = {}

    async def measure(self, mode: str, work: Awaitable[float]) -> float:
        broker, own = cpu_seconds(self.pid), time.process_time()
        rate = await work
        spent = self.spent.setdefault(mode, [0.0, 0.0])
        spent[0] += cpu_seconds(self.pid) - broker
        spent[1] += time.process_time() - own
        return rate


async def run(url: str, broker_pid: int, messages: int, per_txn: int, rounds: int, in_flight: int,
              concurrent_only: bool = False) -> dict[str, object]:
    concurrent = f"transactional_{in_flight}_in_flight"
    alone = [] if concurrent_only else ["transactional_1_in_flight"]
    rates: dict[str, list[float]] = {mode: [] for mode in ("plain_batched", *alone, concurrent)}
    commits: dict[str, list[float]] = {mode: [] for mode in (*alone, concurrent)}
    if not concurrent_only:
        rates["plain_unbatched"] = []
    cpu = _Cpu(broker_pid)
    async with aio.Client(url, enable_transaction=True) as client:
        await _plain(client, 1000, True)  # warm up: connections, the coordinator's lookup
        for _ in range(rounds):
            rates["plain_batched"].append(await cpu.measure("plain_batched", _plain(client, messages, True)))
            for mode in alone:
                rates[mode].append(await cpu.measure(mode, _transactional(client, messages, per_txn, 1, commits[mode])))
            rates[concurrent].append(await cpu.measure(concurrent, _transactional(
                client, messages, per_txn, in_flight, commits[concurrent])))
            if not concurrent_only:
                rates["plain_unbatched"].append(await cpu.measure("plain_unbatched", _plain(client, messages, False)))
    return {**_summary(rates, commits), "commit_samples_ms": commits,
            "cpu_s": {mode: [round(broker, 3), round(own, 3)] for mode, (broker, own) in cpu.spent.items()}}


def _summary(rates: dict[str, list[float]], commits: dict[str, list[float]]) -> dict[str, object]:
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    return {
        "msg_per_s": {mode: [round(v) for v in values] for mode, values in rates.items()},
        "median_msg_per_s": {mode: round(v) for mode, v in medians.items()},
        "vs_plain_batched": {mode: round(medians[mode] / medians["plain_batched"], 3) for mode in commits},
        "vs_plain_unbatched": {mode: round(medians[mode] / medians["plain_unbatched"], 3) for mode in commits
                               if "plain_unbatched" in medians},
        "commit_ms": {mode: _percentiles(values) for mode, values in commits.items()},
        "commits": {mode: len(values) for mode, values in commits.items()},
    }


def _one_run(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_standalone(Path(tmp) / "data", ["transactionCoordinatorEnabled=true"])
        try:
            result = asyncio.run(run(broker.url, broker.proc.pid, args.messages, args.per_txn, args.rounds,
                                     args.in_flight, args.concurrent_only))
        finally:
            broker.stop()
    result["cpu_us_per_msg"] = _cpu_per_message([result], args.messages)
    return result


def _cpu_per_message(runs: list[dict], messages: int) -> dict[str, dict[str, float]]:
    """Per mode, the broker's and the client's CPU-us per message (each round of a mode sends
    about `messages`)."""
    count = messages * len(runs[0]["msg_per_s"]["plain_batched"]) * len(runs)
    return {mode: {who: round(sum(run["cpu_s"][mode][i] for run in runs) / count * 1e6, 2)
                   for i, who in enumerate(("broker", "client"))}
            for mode in runs[0]["cpu_s"]}


def _side_by_side(args: argparse.Namespace, sources: dict[str, str]) -> dict[str, object]:
    """Each round once per label, each in a process running that label's tree."""
    rounds: dict[str, list[dict]] = {label: [] for label in sources}
    labels = list(sources)
    for round_no in range(args.rounds):
        for label in labels if round_no % 2 == 0 else labels[::-1]:
            command = [sys.executable, __file__, "--messages", str(args.messages), "--per-txn", str(args.per_txn),
                       "--rounds", "1", "--in-flight", str(args.in_flight), "--commits",
                       *(["--concurrent-only"] if args.concurrent_only else [])]
            env = {**os.environ, "PYTHONPATH": str(Path(sources[label]).resolve())}
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                raise SystemExit(f"{label}: {done.stderr.strip().splitlines()[-1:]}")
            rounds[label].append(json.loads(done.stdout))
    result: dict[str, object] = {}
    for label, runs in rounds.items():
        rates = {mode: [rate for run in runs for rate in run["msg_per_s"][mode]] for mode in runs[0]["msg_per_s"]}
        commits = {mode: [ms for run in runs for ms in run["commit_samples_ms"][mode]] for mode in runs[0]["commits"]}
        result[label] = {**_summary(rates, commits), "src": sources[label],
                         "cpu_us_per_msg": _cpu_per_message(runs, args.messages)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--per-txn", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=8, help="transactions open at once in the concurrent mode")
    parser.add_argument("--magnetar", action="append", metavar="LABEL=SRC",
                        help="a magnetar (broker and client) to run from source tree SRC (repeatable)")
    parser.add_argument("--concurrent-only", action="store_true",
                        help="only plain batched and the --in-flight mode, each round (the issue's aim, more often)")
    parser.add_argument("--commits", action="store_true", help=argparse.SUPPRESS)  # a side-by-side round's samples
    args = parser.parse_args()
    sources: dict[str, str] = {}
    for item in args.magnetar or []:
        label, sep, src = item.partition("=")
        if not sep or not label or label in sources or not (Path(src) / "magnetar").is_dir():
            parser.error(f"--magnetar {item!r}: give LABEL=SRC, each label once, SRC holding the magnetar package")
        sources[label] = src
    load_before = os.getloadavg()
    result = _side_by_side(args, sources) if sources else _one_run(args)
    if not args.commits:
        result.pop("commit_samples_ms", None)
        result.pop("cpu_s", None)
    result.update(messages=args.messages, per_txn=args.per_txn, rounds=args.rounds, in_flight=args.in_flight,
                  load_before=[round(x, 2) for x in load_before], load_after=[round(x, 2) for x in os.getloadavg()])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
