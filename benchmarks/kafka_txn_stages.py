"""Where a Kafka transaction's time goes on the broker: per request kind, the time from the
request's arrival to its answer, for librdkafka transactional producers (one, or `--producers`
at once on the partition, each with `--transactions` transactions).

    .venv/bin/python benchmarks/kafka_txn_stages.py [--transactions 200] [--per-txn 100] [--producers 1]

The broker runs in this process (magnetar.testing's InProcessBroker with its Kafka listener),
so the transactional APIs and Produce can be timed where they are answered; the producer's
own time (librdkafka's threads, the GIL it shares with the broker here) is the rest of each
transaction. Prints ONE JSON object: transactions a second, and per stage the median and
90th percentile in ms, with the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kafka"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from confluent_kafka import Producer
from kafka_in_process import start

from magnetar.kafka import produce, txn_apis

_TIMES: dict[str, list[float]] = {}


def _timed(name: str, handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    async def timed(*args: Any) -> Any:
        started = time.perf_counter()
        answer = handler(*args)
        if asyncio.iscoroutine(answer) or asyncio.isfuture(answer):
            answer = await answer
        _TIMES.setdefault(name, []).append((time.perf_counter() - started) * 1000)
        return answer

    return timed


def _instrument() -> None:
    for name in ("add_partitions", "end_txn"):
        setattr(txn_apis.TxnApis, name, _timed(name, getattr(txn_apis.TxnApis, name)))
    plain = produce.ProduceApi.produce_many

    def produced(self: produce.ProduceApi, requests: Any, access: Any) -> list[Any]:
        started = time.perf_counter()
        answers = plain(self, requests, access)
        for answer in answers:  # the connection hands its pipelined requests over together
            if asyncio.isfuture(answer):
                answer.add_done_callback(lambda _: _TIMES.setdefault("produce", []).append(
                    (time.perf_counter() - started) * 1000))
        return answers

    produce.ProduceApi.produce_many = produced  # type: ignore[method-assign]


def _transactions(producer: Producer, count: int, per_txn: int) -> None:
    for _ in range(count):
        producer.begin_transaction()
        for _ in range(per_txn):
            producer.produce("stages", b"x" * 100)
        producer.commit_transaction(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=200)
    parser.add_argument("--per-txn", type=int, default=100)
    parser.add_argument("--producers", type=int, default=1, help="transactional producers at once, each its own id")
    args = parser.parse_args()
    _instrument()
    load_before = [round(x, 2) for x in os.getloadavg()]
    broker, ports = start({"transactionCoordinatorEnabled": True})
    try:
        producers = []
        for index in range(args.producers):
            producer = Producer({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}",
                                 "transactional.id": f"stages-{index}", "linger.ms": 5, "acks": "all"})
            producer.init_transactions(30)
            producer.list_topics("stages", timeout=30)
            producers.append(producer)
        threads = [threading.Thread(target=_transactions, args=(producer, args.transactions, args.per_txn))
                   for producer in producers]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        broker.stop()
    print(json.dumps({
        "transactions": args.transactions, "per_txn": args.per_txn, "producers": args.producers,
        "txn_s": round(args.transactions * args.producers / elapsed, 1),
        "ms_median": {k: round(statistics.median(v), 2) for k, v in _TIMES.items()},
        "ms_p90": {k: round(sorted(v)[int(len(v) * 0.9)], 2) for k, v in _TIMES.items()},
        "load_average_before": load_before, "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        indent=2))


if __name__ == "__main__":
    main()
