"""What producers see when the broker's disk fills, and what the broker does meanwhile.

    .venv/bin/python benchmarks/full_disk_bench.py [--clients official,magnetar,kafka] [--full-seconds 35]

Needs root (it mounts a small file system: a loop-mounted ext4 image, or a size-limited
tmpfs where loop devices are missing). For each client, with its default options: a fresh
30 MB file system holds a broker's data dir; a producer stores a few messages and a
consumer subscribes; a file then takes every free byte, as another process filling the disk
would. While it is full: a synchronous send (its time to fail and what it says), a second
producer sending all along (as the issue's two producers), a new subscription, the health
check and the gauge. Counted over the full window: the TCP connections the broker accepted
and the lines it logged, per second. The file is then deleted: the time until the next send
succeeds, and whether every message receipted is read back.

Kafka (confluent-kafka, acks=all) through `--kafka`: the time until the delivery report and
its error (librdkafka's message.timeout.ms is 300 s by default; --kafka-timeout-ms shortens it).

Prints ONE JSON object, one entry per client.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from compaction_helpers import drain
from small_disk import fill, mount_small_disk
from standalone import Standalone

import magnetar.client

TOPIC = "persistent://public/default/full-bench"
CONFIG = ["managedLedgerMaxSizePerLedgerMbytes=1", "managedLedgerMinLedgerRolloverTimeMinutes=0",
          "defaultRetentionTimeInMinutes=-1", "defaultRetentionSizeInMB=-1"]
CONNECTED = re.compile(r"connected: ")
WHILE_FULL = b"w" * 65536
"""Larger than the slack at the end of a ledger file's last block, so it cannot fit."""


def http_status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def gauge(broker: Standalone, name: str) -> str | None:
    _, text = http_status(f"{broker.admin_url}/metrics")
    return next((line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name)), None)


def timed(action: Callable[[], Any], limit: float = 120.0) -> dict[str, Any]:
    """How long `action` took and what it ended with; given up (left running) after `limit`."""
    outcome: list[str] = []

    def run() -> None:
        try:
            action()
            outcome.append("ok")
        except Exception as exc:  # what the user sees is the figure
            outcome.append(f"{type(exc).__name__}: {exc}")

    start = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    seconds = round(time.monotonic() - start, 2)
    return {"seconds": seconds, "outcome": outcome[0] if outcome else f"no outcome within {limit:g} s"}


class CountingHandler(logging.Handler):
    """Counts the client's own log records (warnings and worse) instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


CLIENT_LOG = CountingHandler()
KEEP_LOGS: Path | None = None


def pulsar_client(kind: str, url: str) -> Any:
    if kind == "official":
        logger = logging.getLogger("official-client")
        logger.propagate = False
        logger.addHandler(CLIENT_LOG)
        logger.setLevel(logging.WARNING)
        return pulsar.Client(url, logger=logger)
    logging.getLogger("magnetar.client").addHandler(CLIENT_LOG)
    logging.getLogger("magnetar.client").propagate = False
    return magnetar.client.Client(url)


class Background:
    """A second producer sending one message every 50 ms for the whole window, as an
    application would; counts what its callbacks got."""

    def __init__(self, producer: Any) -> None:
        self.producer = producer
        self.results: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.producer.send_async(b"background", self._done)

    def _done(self, result: Any, _message_id: Any) -> None:
        name = getattr(result, "name", str(result))
        self.results[name] = self.results.get(name, 0) + 1

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.results


def read_all(client: Any, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    with contextlib.closing(reader):
        return [message.data() for message in drain(reader)]


def log_window(broker: Standalone, start: int) -> tuple[str, int]:
    text = broker.log()
    return text[start:], len(text)


def per_second(count: int, seconds: float) -> float:
    return round(count / seconds, 2)


def run_pulsar(kind: str, disk: Path, full_seconds: float) -> dict[str, Any]:
    broker = Standalone(disk / "data", CONFIG, log_dir=disk.parent).start()
    try:
        client = pulsar_client(kind, broker.url)
        producer = client.create_producer(TOPIC)
        receipted = [f"before-{i}".encode() for i in range(20)]
        for data in receipted:
            producer.send(data)
        consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
        background_producer = client.create_producer(TOPIC)
        filler = fill(disk)
        _, mark = log_window(broker, 0)
        client_log_mark = CLIENT_LOG.count
        window_start = time.monotonic()
        background = Background(background_producer)
        result: dict[str, Any] = {"send": timed(lambda: producer.send(WHILE_FULL))}
        result["new_subscription"] = timed(lambda: client.subscribe(TOPIC, "new-while-full"))
        result["health"] = http_status(f"{broker.admin_url}/admin/v2/brokers/health")
        result["gauge_while_full"] = gauge(broker, "pulsar_broker_storage_writable")
        result["reads_while_full"] = timed(lambda: [consumer.acknowledge(consumer.receive(timeout_millis=10_000))
                                                    for _ in range(5)])
        time.sleep(max(0.0, full_seconds - (time.monotonic() - window_start)))
        window = time.monotonic() - window_start
        text, mark = log_window(broker, mark)
        result["background_callbacks"] = background.stop()
        result["full_window_seconds"] = round(window, 1)
        result["connections_per_second"] = per_second(len(CONNECTED.findall(text)), window)
        result["log_lines_per_second"] = per_second(len(text.splitlines()), window)
        result["client_log_lines_per_second"] = per_second(CLIENT_LOG.count - client_log_mark, window)
        result["log_while_full"] = text.splitlines()[:6]
        filler.unlink()
        freed = time.monotonic()
        recovered = False
        while not recovered and time.monotonic() - freed < 60:
            recovered = timed(lambda: producer.send(b"after"), 60)["outcome"] == "ok"
        result["recovery_seconds"] = round(time.monotonic() - freed, 2) if recovered else "not within 60 s"
        if result["send"]["outcome"] == "ok":
            receipted.append(WHILE_FULL)
        if recovered:
            receipted.append(b"after")
        stored = read_all(client, TOPIC)
        background_lost = result["background_callbacks"].get("Ok", 0) - stored.count(b"background")
        result["receipted_lost"] = len([data for data in receipted if data not in stored]) + max(0, background_lost)
        result["health_after"] = http_status(f"{broker.admin_url}/admin/v2/brokers/health")[0]
        result["gauge_after"] = gauge(broker, "pulsar_broker_storage_writable")
        timed(client.close, 30)
        result["traceback_in_log"] = "Traceback" in broker.log()
        return result
    finally:
        broker.stop()
        keep_log(broker, kind)


def run_kafka(disk: Path, full_seconds: float, timeout_ms: int | None) -> dict[str, Any]:
    import confluent_kafka  # noqa: PLC0415 (only this client needs it)

    broker = Standalone(disk / "data", CONFIG, args=["--kafka", "0"], log_dir=disk.parent).start()
    try:
        options = {"bootstrap.servers": kafka_address(broker), "acks": "all", "log_level": 3}
        if timeout_ms is not None:
            options["message.timeout.ms"] = timeout_ms
        producer = confluent_kafka.Producer(options)
        reports: list[tuple[float, Any]] = []
        def report(err: Any, _msg: Any) -> None:
            reports.append((time.monotonic(), err))

        producer.produce("full-bench", b"before", callback=report)
        producer.flush(30)
        filler = fill(disk)
        _, mark = log_window(broker, 0)
        start = time.monotonic()
        producer.produce("full-bench", WHILE_FULL, callback=report)
        while len(reports) < 2 and time.monotonic() - start < 400:
            producer.poll(0.1)
        window = time.monotonic() - start
        text, _ = log_window(broker, mark)
        result: dict[str, Any] = {}
        if len(reports) == 2:
            result["delivery_report"] = {"seconds": round(reports[1][0] - start, 2), "error": str(reports[1][1])}
        result["window_seconds"] = round(window, 1)
        result["log_lines_per_second"] = per_second(len(text.splitlines()), window)
        result["log_while_full"] = text.splitlines()[:6]
        filler.unlink()
        freed = time.monotonic()
        recovered: list[Any] = []
        while not recovered and time.monotonic() - freed < 60:
            producer.produce("full-bench", b"after", callback=lambda err, _msg: recovered.append(err))
            producer.flush(30)
            if recovered and recovered[0] is not None:
                recovered.clear()
        result["recovery_seconds"] = round(time.monotonic() - freed, 2)
        return result
    finally:
        broker.stop()
        keep_log(broker, "kafka")


def keep_log(broker: Standalone, kind: str) -> None:
    if KEEP_LOGS is not None and broker.log_path is not None:
        shutil.copy(broker.log_path, KEEP_LOGS / f"{kind}-broker.log")


def kafka_address(broker: Standalone) -> str:
    match = re.search(r"Kafka listener on ([\d.]+:\d+)", broker.log())
    if match is None:
        raise SystemExit("the broker did not log its Kafka listener")
    return match.group(1)


@contextlib.contextmanager
def fresh_disk(size_mb: int) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="full-disk-bench-") as tmp, mount_small_disk(Path(tmp), size_mb) as disk:
        yield disk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="official,magnetar,kafka")
    parser.add_argument("--full-seconds", type=float, default=35.0, help="how long the disk stays full")
    parser.add_argument("--size-mb", type=int, default=30)
    parser.add_argument("--kafka-timeout-ms", type=int, default=None)
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy each broker's log into this directory")
    args = parser.parse_args()
    global KEEP_LOGS  # noqa: PLW0603 (a script's one option, read where the broker stops)
    KEEP_LOGS = args.keep_logs
    if os.geteuid() != 0:
        raise SystemExit("needs root: it mounts a small file system")
    results: dict[str, Any] = {"load_average": os.getloadavg()}
    for kind in args.clients.split(","):
        with fresh_disk(args.size_mb) as disk:
            results["file_system"] = subprocess.run(["findmnt", "-no", "FSTYPE", str(disk)], capture_output=True,
                                                    text=True, check=False).stdout.strip()
            if kind == "kafka":
                results[kind] = run_kafka(disk, args.full_seconds, args.kafka_timeout_ms)
            else:
                results[kind] = run_pulsar(kind, disk, args.full_seconds)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
