"""What several benchmarks need around a broker process: its CPU and memory from /proc,
and a measured produce run with the official client.

Kept apart from the scripts so that the soak, the side-by-side comparison with other
brokers and the throughput benchmark read a process's cost the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import cpu_seconds, rss_kb
from standalone import Standalone

PAYLOAD = b"x" * 100
MAX_PENDING = 5000

__all__ = ["MAX_PENDING", "PAYLOAD", "Meter", "ProduceResult", "Standalone", "add_tree_options", "cpu_seconds",
           "official_client", "open_fds", "produce", "producer_options", "rss_mb", "start_standalone", "trees_by_round"]


def add_tree_options(parser: argparse.ArgumentParser) -> None:
    """--magnetar LABEL=SRC (repeated: versions side by side in one run) and --rounds."""
    parser.add_argument("--magnetar", action="append", metavar="LABEL=SRC",
                        help="a source tree to run (repeat to compare); default: this checkout's src")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, alternating the trees' order")


def trees_by_round(args: argparse.Namespace) -> Iterator[tuple[int, str, str]]:
    """(round from 1, label, source tree) in the order to run them: each round reverses the last's."""
    sources = [item.split("=", 1) for item in args.magnetar or [f"magnetar={Path(__file__).parent.parent / 'src'}"]]
    for round_ in range(args.rounds):
        for label, source in sources if round_ % 2 == 0 else sources[::-1]:
            yield round_ + 1, label, source


def start_standalone(data_dir: Path, config: list[str]) -> Standalone:
    """A broker with `-c` items from the command line; one that refuses them ends the script with its reason."""
    try:
        return Standalone(data_dir, list(config)).start()
    except (RuntimeError, TimeoutError) as error:
        lines = str(error).strip().splitlines()
        raise SystemExit(f"magnetar standalone did not start: {lines[-1] if lines else error}") from None


def rss_mb(pid: int) -> float:
    return rss_kb(pid) / 1024


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Meter:
    """CPU seconds of some processes and wall time over one `with` block.

    Our own process is read with `time.process_time` (the official client's C++ I/O
    threads are ours too), the others from /proc; clock ticks are 10 ms, so a block
    should last well over a second for a figure to mean something.
    """

    def __init__(self, *pids: int) -> None:
        self.pids = pids
        self.cpu: dict[int, float] = {}
        self.own_cpu = 0.0
        self.wall = 0.0

    def __enter__(self) -> Meter:
        self._start = {pid: cpu_seconds(pid) for pid in self.pids}
        self._own, self._t0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.wall = time.perf_counter() - self._t0
        self.own_cpu = time.process_time() - self._own
        self.cpu = {pid: cpu_seconds(pid) - start for pid, start in self._start.items()}


def official_client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=30, io_threads=1,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def producer_options(batched: bool) -> dict:
    """The producer the issue measures: 5,000 pending, blocking when full; batches of 1000 / 10 ms."""
    options: dict = dict(batching_enabled=batched, max_pending_messages=MAX_PENDING, block_if_queue_full=True,
                         send_timeout_millis=120_000)
    if batched:
        options.update(batching_max_messages=1000, batching_max_publish_delay_ms=10,
                       batching_max_allowed_size_in_bytes=1024 * 1024)
    return options


@dataclass
class ProduceResult:
    sent: int
    failed: int
    seconds: float


class _Receipts:
    """The send callback: counts what came back, wakes the sender when all have.

    A real callback (not None) because an application needs one to know a message is
    stored; it costs the client, not the broker.
    """

    def __init__(self, expected: int) -> None:
        self.expected, self.ok, self.failed = expected, 0, 0
        self.first_error = ""
        self.done = threading.Event()

    def __call__(self, result: pulsar.Result, _msg_id: object) -> None:
        if result == pulsar.Result.Ok:
            self.ok += 1
        else:
            self.failed += 1
            self.first_error = self.first_error or str(result)
        if self.ok + self.failed >= self.expected:
            self.done.set()


def produce(producer: pulsar.Producer, count: int, timeout: float = 600.0) -> ProduceResult:
    """`count` messages with send_async, timed from the first send to the last receipt."""
    receipts = _Receipts(count)
    t0 = time.perf_counter()
    for _ in range(count):
        producer.send_async(PAYLOAD, receipts)
    producer.flush()
    if not receipts.done.wait(timeout):
        raise TimeoutError(f"{receipts.ok + receipts.failed} of {count} receipts within {timeout}s")
    if receipts.failed:
        print(f"warning: {receipts.failed} sends failed, first: {receipts.first_error}", file=sys.stderr)
    return ProduceResult(receipts.ok, receipts.failed, time.perf_counter() - t0)
