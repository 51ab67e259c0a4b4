"""Issue 47's figure: Kafka transactional produce beside plain Kafka produce, in one run.

    .venv/bin/python benchmarks/kafka_txn_bench.py [--messages 20000] [--rounds 3] [--per-txn 100] [--producers 4]
        [--warm] [--magnetar LABEL=SRC ...]

One `magnetar standalone --kafka 0 -c transactionCoordinatorEnabled=true` with its defaults
(answers after the group's fsync). confluent-kafka (librdkafka) producers, 100-byte values,
linger.ms=5, acks=all, one partition per run: plain (idempotence off, librdkafka's default),
idempotent, and transactional with `--per-txn` records a transaction (begin, produce,
commit_transaction, which flushes); then plain and transactional again with `--producers`
producers at once on the same partition, each sending its share (as several
kafka-producer-perf-test processes run), every producer with the same settings. Rounds
alternate the kinds, so a load change hits all alike. With `--warm` the plain and idempotent
producers deliver a record (to another topic) before their clock starts, so an idempotent
producer's id is already assigned: librdkafka sends one idempotent Produce request per
partition at a time, so its rate is a request's size over the broker's time to answer one.
Each run is checked: a read_committed consumer reads back exactly the records sent.

With `--magnetar LABEL=SRC` (repeated) each round runs every kind on a broker of each
source tree in turn (PYTHONPATH=SRC; all started first), so two versions meet the same
load; without it, one broker of the running environment's magnetar.

Prints ONE JSON object: per run msg/s and the broker's CPU seconds per second (near 1.0 it
is busy all the time, as much as one Python process can be) and its event loop's seconds
per second running and runnable (waiting for a core), the median per kind, transactional / plain and
transactional / idempotent (per label with --magnetar), and the machine's load average
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

from _broker_process import PAYLOAD, Standalone, cpu_seconds
from confluent_kafka import Consumer, Producer, TopicPartition

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
_BASE = {"linger.ms": 5, "acks": "all", "queue.buffering.max.messages": 1_000_000}


def _send(producer: Producer, topic: str, count: int) -> None:
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, PAYLOAD)
                break
            except BufferError:
                producer.poll(0.001)


def plain(bootstrap: str, topic: str, count: int, per_txn: int, *, idempotent: bool, warm: bool = False) -> float:
    """With `warm`, one record to another topic first: librdkafka asks for an idempotent
    producer's id only once the partition's broker connection is up, else on a 500 ms timer,
    a wait a 20,000-record run would mostly measure."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, **_BASE})
    producer.list_topics(topic, timeout=30)  # the topic exists before the clock starts
    if warm:
        producer.produce(f"{topic}-warm", PAYLOAD)
        if producer.flush(30):
            raise SystemExit(f"{topic}-warm: the warm-up record was not delivered")
    started = time.perf_counter()
    _send(producer, topic, count)
    if producer.flush(600):
        raise SystemExit(f"{topic}: records left unsent")
    return count / (time.perf_counter() - started)


def transactional(bootstrap: str, topic: str, count: int, per_txn: int) -> float:
    producer = _transactional_producer(bootstrap, f"bench-{topic}", topic)
    started = time.perf_counter()
    _transactions(producer, topic, count, per_txn)
    return count / (time.perf_counter() - started)


def _transactional_producer(bootstrap: str, transactional_id: str, topic: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **_BASE})
    producer.init_transactions(30)
    producer.list_topics(topic, timeout=30)
    return producer


def _transactions(producer: Producer, topic: str, count: int, per_txn: int) -> None:
    for first in range(0, count, per_txn):
        producer.begin_transaction()
        _send(producer, topic, min(per_txn, count - first))
        producer.commit_transaction(60)


def concurrent(bootstrap: str, topic: str, count: int, per_txn: int, *, producers: int, txn: bool) -> float:
    """`producers` producers (threads; librdkafka's calls let go of the GIL) sending their
    shares at once, timed from a common start to the last one's end."""
    shares = [count // producers + (i < count % producers) for i in range(producers)]
    if txn:
        made = [_transactional_producer(bootstrap, f"bench-{topic}-{i}", topic) for i in range(producers)]
    else:
        made = [Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, **_BASE})
                for _ in range(producers)]
        for producer in made:
            producer.list_topics(topic, timeout=30)
    start = threading.Barrier(producers + 1)
    failures: list[BaseException] = []

    def run(producer: Producer, share: int) -> None:
        start.wait()
        try:
            if txn:
                _transactions(producer, topic, share, per_txn)
            else:
                _send(producer, topic, share)
                if producer.flush(600):
                    raise RuntimeError(f"{topic}: records left unsent")
        except BaseException as exc:  # reported once every thread ended
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(p, share)) for p, share in zip(made, shares, strict=True)]
    for thread in threads:
        thread.start()
    start.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{topic}: {failures[0]!r}")
    return count / elapsed


def _loop_thread(pid: int) -> tuple[float, float]:
    """(seconds on a core, seconds runnable and waiting for one) of the broker's main thread,
    its event loop: when the two add up to about the run's time, the loop is never idle (on
    a loaded machine, waiting for a core counts); well below, it waits for the disk or clients."""
    running, waiting, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(running) / 1e9, int(waiting) / 1e9


def check(bootstrap: str, topic: str, count: int) -> None:
    """A read_committed consumer gets exactly `count` records (markers are not records)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = 0, time.monotonic() + 120
    while time.monotonic() < deadline:
        batch = [m for m in consumer.consume(10_000, timeout=1) if not m.error()]
        got += len(batch)
        if not batch and got >= count:
            break
    consumer.close()
    if got != count:
        raise SystemExit(f"{topic}: read {got} of {count} records back")


def _ratios(medians: dict[str, float], many: int) -> dict[str, float]:
    return {"transactional_over_plain": round(medians["transactional"] / medians["plain"], 2),
            "transactional_over_idempotent": round(medians["transactional"] / medians["idempotent"], 2),
            f"transactional_x{many}_over_plain_x{many}": round(medians[f"transactional_x{many}"]
                                                               / medians[f"plain_x{many}"], 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-txn", type=int, default=100)
    parser.add_argument("--producers", type=int, default=4, help="producers at once in the concurrent kinds")
    parser.add_argument("--warm", action="store_true",
                        help="plain and idempotent producers deliver one record before the clock starts")
    parser.add_argument("--magnetar", action="append", default=[], metavar="LABEL=SRC",
                        help="a source tree to run (its src directory), repeated to compare versions")
    args = parser.parse_args()
    trees = dict(item.split("=", 1) for item in args.magnetar) if args.magnetar else {"magnetar": None}
    many = args.producers
    kinds = {"plain": lambda *a: plain(*a, idempotent=False, warm=args.warm),
             "idempotent": lambda *a: plain(*a, idempotent=True, warm=args.warm),
             "transactional": transactional,
             f"plain_x{many}": lambda *a: concurrent(*a, producers=many, txn=False),
             f"transactional_x{many}": lambda *a: concurrent(*a, producers=many, txn=True)}
    runs: dict[str, dict[str, list[float]]] = {label: {kind: [] for kind in kinds} for label in trees}
    busy: dict[str, dict[str, list[float]]] = {label: {kind: [] for kind in kinds} for label in trees}
    """The broker's CPU seconds per second of each run (1.0: one core, all a GIL-bound broker can use)."""
    loop: dict[str, dict[str, list[list[float]]]] = {label: {kind: [] for kind in kinds} for label in trees}
    """Per run, the broker's event-loop thread's seconds per second on a core and waiting for one."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="magnetar-kafka-txn-bench-") as tmp:
        brokers = {}
        try:
            for label, src in trees.items():
                brokers[label] = Standalone(Path(tmp) / f"data-{label}", ["transactionCoordinatorEnabled=true"],
                                            args=["--kafka", "0"], env={"PYTHONPATH": src} if src else {}).start()
            for round_ in range(args.rounds):
                for label, broker in brokers.items():
                    bootstrap = f"127.0.0.1:{KAFKA_READY.findall(broker.log())[-1]}"
                    for kind, run in kinds.items():
                        topic = f"bench-{kind.replace('_', '-')}-{round_}"
                        pid = broker.proc.pid
                        cpu_before, loop_before = cpu_seconds(pid), _loop_thread(pid)
                        wall_before = time.perf_counter()
                        runs[label][kind].append(round(run(bootstrap, topic, args.messages, args.per_txn)))
                        wall = time.perf_counter() - wall_before
                        busy[label][kind].append(round((cpu_seconds(pid) - cpu_before) / wall, 2))
                        loop[label][kind].append([round((after - before) / wall, 2) for after, before
                                                  in zip(_loop_thread(pid), loop_before, strict=True)])
                        check(bootstrap, topic, args.messages)
        finally:
            for broker in brokers.values():
                broker.stop()
    medians = {label: {kind: statistics.median(values) for kind, values in by_kind.items()}
               for label, by_kind in runs.items()}
    single = len(trees) == 1
    print(json.dumps({
        "messages": args.messages, "per_txn": args.per_txn, "warm": args.warm, "value_bytes": len(PAYLOAD),
        "msg_s": runs[next(iter(runs))] if single else runs,
        "median_msg_s": medians[next(iter(medians))] if single else medians,
        "broker_cpu_s_per_s": busy[next(iter(busy))] if single else busy,
        "loop_thread_running_and_runnable_s_per_s": loop[next(iter(loop))] if single else loop,
        **(_ratios(medians[next(iter(medians))], many) if single else
           {"ratios": {label: _ratios(by_kind, many) for label, by_kind in medians.items()}}),
        "load_average_before": load_before, "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2))


if __name__ == "__main__":
    main()
