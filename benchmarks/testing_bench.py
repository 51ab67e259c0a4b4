"""How long a test waits for a broker: magnetar.testing's context manager, enter to ready.

Side by side, in one run:
- `in_process_cold`: the first `with magnetar.testing.standalone()` of a fresh interpreter
  (it imports the broker), measured inside a child process;
- `in_process`: later ones in the same process (a test suite's second broker onwards);
- `subprocess`: `standalone(subprocess=True)`, a `magnetar standalone` child process;
- `suite_harness`: tests/standalone.py's Standalone, how the suite starts its brokers.

Each: median and max seconds to ready (listening on both ports), to a first message
produced and received with the official client, and to closed. Prints JSON with the load.

    .venv/bin/python benchmarks/testing_bench.py --runs 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

import magnetar.testing

COLD_START = """
import time
started = time.perf_counter()
import magnetar.testing
with magnetar.testing.standalone():
    print(time.perf_counter() - started)
"""

Opener = Callable[[], AbstractContextManager[str]]


@contextmanager
def testing_broker(subprocess_mode: bool) -> Iterator[str]:
    with magnetar.testing.standalone(subprocess=subprocess_mode) as broker:
        yield broker.service_url


@contextmanager
def suite_broker() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-") as directory:
        broker = Standalone(Path(directory) / "data").start()
        try:
            yield broker.url
        finally:
            broker.stop()


def first_message(url: str) -> None:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    topic = f"persistent://public/default/bench-{uuid.uuid4().hex}"
    consumer = client.subscribe(topic, "sub")
    client.create_producer(topic).send(b"hello")
    consumer.acknowledge(consumer.receive(10_000))
    client.close()


def measure(opener: Opener, runs: int) -> dict[str, dict[str, float]]:
    ready, message, closed = [], [], []
    for _ in range(runs):
        started = time.perf_counter()
        with opener() as url:
            ready.append(time.perf_counter() - started)
            first_message(url)
            message.append(time.perf_counter() - started)
            closing = time.perf_counter()
        closed.append(time.perf_counter() - closing)
    return {"ready_s": summary(ready), "first_message_s": summary(message), "close_s": summary(closed)}


def cold_starts(runs: int) -> dict[str, dict[str, float]]:
    times = [float(subprocess.run([sys.executable, "-c", COLD_START], capture_output=True, text=True, check=True)
                   .stdout) for _ in range(runs)]
    return {"ready_s": summary(times)}


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 4), "max": round(max(values), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    load_start = os.getloadavg()
    result: dict[str, object] = {
        "runs": args.runs, "cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in load_start],
        "in_process_cold": cold_starts(args.runs),
        "in_process_warm_up": measure(lambda: testing_broker(False), 1)["ready_s"]["max"],
        "in_process": measure(lambda: testing_broker(False), args.runs),
        "subprocess": measure(lambda: testing_broker(True), args.runs),
        "suite_harness": measure(suite_broker, args.runs),
    }
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
