"""Transactional produce against plain produce, and commit latency (PIP-31, issue 46).

    .venv/bin/python benchmarks/transactions_bench.py [--messages 20000] [--per-txn 100] [--rounds 3]
                                                      [--in-flight 8]

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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from _broker_process import PAYLOAD, start_standalone

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


async def run(url: str, messages: int, per_txn: int, rounds: int, in_flight: int) -> dict[str, object]:
    concurrent = f"transactional_{in_flight}_in_flight"
    rates: dict[str, list[float]] = {"plain_batched": [], "plain_unbatched": [], "transactional_1_in_flight": [],
                                     concurrent: []}
    commits: dict[str, list[float]] = {"transactional_1_in_flight": [], concurrent: []}
    async with aio.Client(url, enable_transaction=True) as client:
        await _plain(client, 1000, True)  # warm up: connections, the coordinator's lookup
        for _ in range(rounds):
            rates["plain_batched"].append(await _plain(client, messages, True))
            rates["transactional_1_in_flight"].append(
                await _transactional(client, messages, per_txn, 1, commits["transactional_1_in_flight"]))
            rates[concurrent].append(await _transactional(client, messages, per_txn, in_flight, commits[concurrent]))
            rates["plain_unbatched"].append(await _plain(client, messages, False))
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    return {
        "msg_per_s": {mode: [round(v) for v in values] for mode, values in rates.items()},
        "median_msg_per_s": {mode: round(v) for mode, v in medians.items()},
        "vs_plain_batched": {mode: round(medians[mode] / medians["plain_batched"], 3) for mode in commits},
        "vs_plain_unbatched": {mode: round(medians[mode] / medians["plain_unbatched"], 3) for mode in commits},
        "commit_ms": {mode: _percentiles(values) for mode, values in commits.items()},
        "commits": {mode: len(values) for mode, values in commits.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--per-txn", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=8, help="transactions open at once in the concurrent mode")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_standalone(Path(tmp) / "data", ["transactionCoordinatorEnabled=true"])
        try:
            result = asyncio.run(run(broker.url, args.messages, args.per_txn, args.rounds, args.in_flight))
        finally:
            broker.stop()
    result.update(messages=args.messages, per_txn=args.per_txn, rounds=args.rounds, in_flight=args.in_flight,
                  load_before=[round(x, 2) for x in load_before], load_after=[round(x, 2) for x in os.getloadavg()])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
