"""Transactional produce against plain produce, and commit latency (PIP-31, issue 46).

    .venv/bin/python benchmarks/transactions_bench.py [--messages 20000] [--per-txn 100] [--rounds 3]

Starts one `magnetar standalone` with transactionCoordinatorEnabled=true and produces 100-byte
messages with magnetar.client.aio, in alternating rounds on fresh topics:

  plain_batched     send() pipelined, the client's default batching
  plain_unbatched   send() pipelined, batching off (a transaction's messages are sent unbatched)
  transactional     `--per-txn` messages a transaction, pipelined, then commit(); a new
                    transaction opened for the next group

Prints one JSON document: per mode the msg/s of each round and their median, the ratio of
transactional to each plain mode, commit latency (from commit() called to answered, the
sends already receipted) p50/p99 in ms, and the machine's load average before and after.
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
    await asyncio.gather(*(producer.send(PAYLOAD) for _ in range(count)))
    elapsed = time.perf_counter() - start
    await producer.close()
    return count / elapsed


async def _transactional(client: aio.Client, count: int, per_txn: int, commits: list[float]) -> float:
    producer = await client.create_producer(f"bench-{uuid.uuid4().hex[:8]}", max_pending_messages=5000,
                                            block_if_queue_full=True)
    start = time.perf_counter()
    for _ in range(count // per_txn):
        txn = await client.new_transaction(timeout=60)
        await asyncio.gather(*(producer.send(PAYLOAD, txn=txn) for _ in range(per_txn)))
        committing = time.perf_counter()
        await txn.commit()
        commits.append((time.perf_counter() - committing) * 1000)
    elapsed = time.perf_counter() - start
    await producer.close()
    return count // per_txn * per_txn / elapsed


async def run(url: str, messages: int, per_txn: int, rounds: int) -> dict[str, object]:
    rates: dict[str, list[float]] = {"plain_batched": [], "plain_unbatched": [], "transactional": []}
    commits: list[float] = []
    async with aio.Client(url, enable_transaction=True) as client:
        await _plain(client, 1000, True)  # warm up: connections, the coordinator's lookup
        for _ in range(rounds):
            rates["plain_batched"].append(await _plain(client, messages, True))
            rates["transactional"].append(await _transactional(client, messages, per_txn, commits))
            rates["plain_unbatched"].append(await _plain(client, messages, False))
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    commits.sort()
    return {
        "msg_per_s": {mode: [round(v) for v in values] for mode, values in rates.items()},
        "median_msg_per_s": {mode: round(v) for mode, v in medians.items()},
        "transactional_vs_plain_batched": round(medians["transactional"] / medians["plain_batched"], 3),
        "transactional_vs_plain_unbatched": round(medians["transactional"] / medians["plain_unbatched"], 3),
        "commit_ms_p50": round(commits[len(commits) // 2], 2),
        "commit_ms_p99": round(commits[min(len(commits) - 1, int(len(commits) * 0.99))], 2),
        "commits": len(commits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--per-txn", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_standalone(Path(tmp) / "data", ["transactionCoordinatorEnabled=true"])
        try:
            result = asyncio.run(run(broker.url, args.messages, args.per_txn, args.rounds))
        finally:
            broker.stop()
    result.update(messages=args.messages, per_txn=args.per_txn, rounds=args.rounds,
                  load_before=[round(x, 2) for x in load_before], load_after=[round(x, 2) for x in os.getloadavg()])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
