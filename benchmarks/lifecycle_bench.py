"""Storage lifecycle: does disk usage stay bounded while data flows through a topic?

Starts a real `magnetar standalone` with default retention (0/0: consumed data goes) and
small ledgers (`managedLedgerMaxSizePerLedgerMbytes`, min rollover 0), then produces and
consumes `--total-mb` through one topic with the official client (send_async with a
callback per message, an ack per message), sampling the data dir's disk usage. Prints JSON:
disk usage max/final against the ledger size, throughput, and what trimming cost (from the
broker's "trimmed N ledgers (B bytes) in T ms" log lines). `--plot FILE` draws usage over time.

    .venv/bin/python benchmarks/lifecycle_bench.py --total-mb 2048 --plot docs/lifecycle_disk_usage.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

TOPIC = "persistent://public/default/lifecycle"
TRIMMED = re.compile(r"trimmed (\d+) ledgers \((\d+) bytes\) in ([\d.]+) ms")
MB = 1024 * 1024


def disk_usage(directory: Path) -> int:
    """Bytes allocated on disk under `directory` (what `du` counts, sparse files included)."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # trimmed while we walked
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


class Sampler(threading.Thread):
    def __init__(self, directory: Path, period: float) -> None:
        super().__init__(daemon=True)
        self.directory, self.period = directory, period
        self.samples: list[tuple[float, int]] = []
        self.stop_event = threading.Event()
        self.started_at = time.monotonic()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.samples.append((time.monotonic() - self.started_at, disk_usage(self.directory)))
            self.stop_event.wait(self.period)


def produce(client: pulsar.Client, count: int, payload: bytes, errors: list[pulsar.Result]) -> None:
    producer = client.create_producer(TOPIC, batching_enabled=True, batching_max_messages=100,
                                      batching_max_publish_delay_ms=5, block_if_queue_full=True,
                                      max_pending_messages=2000)
    done = threading.Semaphore(0)

    def callback(result: pulsar.Result, _message_id: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)
        done.release()

    for _ in range(count):
        producer.send_async(payload, callback)
    for _ in range(count):
        done.acquire()
    producer.close()


def consume(consumer: pulsar.Consumer, count: int) -> None:
    for _ in range(count):
        consumer.acknowledge(consumer.receive(timeout_millis=60_000))


def run(args: argparse.Namespace, work: Path) -> dict:
    data_dir = work / "data"
    config = [f"managedLedgerMaxSizePerLedgerMbytes={args.ledger_mb}", "managedLedgerMinLedgerRolloverTimeMinutes=0"]
    broker = Standalone(data_dir, config).start()
    try:
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe(TOPIC, "bench", receiver_queue_size=2000)
        payload = os.urandom(args.message_kb * 1024)
        count = args.total_mb * 1024 // args.message_kb
        sampler = Sampler(data_dir, args.sample_seconds)
        baseline = disk_usage(data_dir)
        errors: list[pulsar.Result] = []
        sampler.start()
        started = time.monotonic()
        reader = threading.Thread(target=consume, args=(consumer, count))
        reader.start()
        produce(client, count, payload, errors)
        reader.join()
        elapsed = time.monotonic() - started
        settle_deadline = time.monotonic() + 10  # the last trims after the final acks
        while disk_usage(data_dir) - baseline > args.ledger_mb * MB * 2 and time.monotonic() < settle_deadline:
            time.sleep(0.2)
        sampler.stop_event.set()
        sampler.join()
        final = disk_usage(data_dir)
        client.close()
    finally:
        broker.stop()
    trims = [tuple(map(float, match)) for match in TRIMMED.findall(broker.log())]
    ledgers = sum(t[0] for t in trims)
    trim_ms = sum(t[2] for t in trims)
    peak = max(usage for _, usage in sampler.samples)
    return {
        "total_mb": args.total_mb, "message_kb": args.message_kb, "messages": count, "send_errors": len(errors),
        "ledger_size_mb": args.ledger_mb,
        "disk_baseline_mb": round(baseline / MB, 1),
        "disk_max_mb": round(peak / MB, 1),
        "disk_final_mb": round(final / MB, 1),
        "disk_max_over_ledger_size": round((peak - baseline) / (args.ledger_mb * MB), 2),
        "seconds": round(elapsed, 1),
        "throughput_mb_s": round(args.total_mb / elapsed, 1),
        "throughput_msg_s": round(count / elapsed),
        "trims": len(trims), "ledgers_trimmed": int(ledgers),
        "trim_ms_per_ledger": round(trim_ms / ledgers, 2) if ledgers else None,
        "trim_ms_max": round(max((t[2] for t in trims), default=0.0), 2),
        "samples": sampler.samples,
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 (optional: only for --plot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    times = [t for t, _ in result["samples"]]
    usage = [u / MB for _, u in result["samples"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(times, usage, label="data dir disk usage")
    ax.axhline(result["ledger_size_mb"] + result["disk_baseline_mb"], color="grey", linestyle="--",
               label=f"baseline + one ledger ({result['ledger_size_mb']} MB)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MB on disk")
    ax.set_title(f"{result['total_mb']} MB through one topic, retention 0/0")
    ax.legend(loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mb", type=int, default=2048, help="data produced and consumed")
    parser.add_argument("--ledger-mb", type=int, default=64, help="managedLedgerMaxSizePerLedgerMbytes")
    parser.add_argument("--message-kb", type=int, default=16)
    parser.add_argument("--sample-seconds", type=float, default=0.25)
    parser.add_argument("--plot", type=Path, help="write a PNG of disk usage over time (needs matplotlib)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lifecycle-bench-") as work:
        result = run(args, Path(work))
    if args.plot:
        plot(result, args.plot)
    samples = result.pop("samples")
    result["samples_taken"] = len(samples)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
