"""What a Prometheus scrape of /metrics costs a broker with many topics (issue 45).

Each broker gets `--topics` topics in public/default, each with one subscription (created
over the admin API). Then, per round and broker in turn, /metrics is fetched while a
probe on a connection of its own asks `/admin/v2/brokers/ready` back to back: the
probe's slowest answer during the scrape is how long every client of the broker waited
behind it (the scrape's longest hold on the event loop). Prints one JSON object: per
broker the scrape's seconds and bytes, the probe's worst and median milliseconds during
scrapes, how long the broker took to stop, and the load average before and after.

    .venv/bin/python benchmarks/metrics_bench.py --topics 10000 --rounds 3 \\
        --magnetar before=/path/to/old/src --magnetar after=src
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import urllib.parse
from http.client import HTTPConnection
from pathlib import Path

from _broker_process import Standalone


def _connection(admin_url: str) -> HTTPConnection:
    url = urllib.parse.urlsplit(admin_url)
    return HTTPConnection(url.hostname, url.port, timeout=120)


def _request(connection: HTTPConnection, method: str, path: str) -> bytes:
    connection.request(method, path)
    response = connection.getresponse()
    body = response.read()
    if response.status >= 300:
        raise SystemExit(f"{method} {path}: {response.status} {body[:200]!r}")
    return body


def populate(admin_url: str, topics: int) -> None:
    connection = _connection(admin_url)
    for n in range(topics):
        path = f"/admin/v2/persistent/public/default/topic-{n:05d}"
        _request(connection, "PUT", path)
        _request(connection, "PUT", f"{path}/subscription/sub")
    connection.close()


class Probe(threading.Thread):
    """Back-to-back cheap requests; each answer's milliseconds kept while `recording` is set."""

    def __init__(self, admin_url: str) -> None:
        super().__init__(daemon=True)
        self.connection = _connection(admin_url)
        self.recording = threading.Event()
        self.stopped = threading.Event()
        self.samples: list[float] = []

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.perf_counter()
            _request(self.connection, "GET", "/admin/v2/brokers/ready")
            if self.recording.is_set():
                self.samples.append((time.perf_counter() - started) * 1000)


def scrape(broker: Standalone) -> dict:
    probe = Probe(broker.admin_url)
    probe.start()
    connection = _connection(broker.admin_url)
    probe.recording.set()
    started = time.perf_counter()
    body = _request(connection, "GET", "/metrics")
    seconds = time.perf_counter() - started
    probe.recording.clear()
    probe.stopped.set()
    probe.join()
    connection.close()
    return {"seconds": round(seconds, 3), "bytes": len(body), "probe_max_ms": round(max(probe.samples, default=0), 2),
            "probe_median_ms": round(statistics.median(probe.samples), 2) if probe.samples else None,
            "probe_answers": len(probe.samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--magnetar", action="append", metavar="LABEL=SRC",
                        help="a magnetar to run from source tree SRC (repeatable; default: this environment's)")
    args = parser.parse_args()
    versions = dict(item.partition("=")[::2] for item in args.magnetar or ["magnetar="])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="magnetar-metrics-") as tmp:
        brokers = {}
        try:
            for label, src in versions.items():
                env = {"PYTHONPATH": str(Path(src).resolve())} if src else {}
                brokers[label] = Standalone(Path(tmp) / label, [], env=env).start()
                populate(brokers[label].admin_url, args.topics)
            results: dict[str, list[dict]] = {label: [] for label in brokers}
            for _ in range(args.rounds):
                for label, broker in brokers.items():
                    results[label].append(scrape(broker))
        finally:
            stop_seconds = {}
            for label, broker in brokers.items():
                started = time.perf_counter()
                broker.stop(timeout=300)
                stop_seconds[label] = round(time.perf_counter() - started, 1)
    print(json.dumps({"topics": args.topics, "rounds": results, "stop_seconds": stop_seconds,
                      "load_before": load_before, "load_after": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
