"""Latency at ordinary rates (issue 45): magnetar beside redis-server and nats-server, one run.

    .venv/bin/python benchmarks/latency_bench.py                          # ~2 min, 3 s a cell
    .venv/bin/python benchmarks/latency_bench.py --duration 20 --rounds 2
    .venv/bin/python benchmarks/latency_bench.py --magnetar before=/work/main/src --magnetar after=src

Open loop: 100-byte messages are sent at a fixed rate (1,000 and 10,000 msg/s by default),
each at its scheduled time whether or not earlier ones were answered, and latency is
counted from that scheduled time, so a stall of the broker (or a send blocked by a full
queue, `block_if_queue_full=True`) shows in the figures instead of slowing the sender.
Publish latency is scheduled send to receipt; end to end is scheduled send to receipt by
a consumer in another process (it acknowledges each message). The first `--warmup`
seconds of each cell are sent but not counted.

magnetar is driven with the official client and with magnetar.client, batching off and
the client's default batching, a real callback on every message and on every tenth (the
others None: only the tenth are timed for publish). Each magnetar is a `magnetar standalone`
with its defaults (receipt after fsync); `--magnetar LABEL=SRC` runs one per source tree
(PYTHONPATH=SRC), to put two versions side by side in one run. The peers, when installed
(see peers.py): redis-server with streams and `appendfsync always` (XADD pipelined on one
socket, replies after the pass's fsync), nats-server JetStream (file
store; nats-py `publish` awaiting each ack), their consumers XREAD / an ordered push consumer.

Prints ONE JSON object: per cell p50/p99/p99.9/max (ms) of publish and end-to-end latency,
messages timed, how late the sender itself ran, and for magnetar what the broker saw during
the cell (from /metrics, when it exports them: mean publish latency, event-loop lag probes;
with `--stages`, each stage of the publish path timed inside the broker, warm-up included:
benchmarks/stage_probe/sitecustomize.py says which);
`table` has "p50 / p99" per cell; the load average at start and end.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from _broker_figures import broker_between, broker_figures
from _broker_process import Standalone
from _latency_drivers import (
    AsyncSender,
    RedisPipelinedPublisher,
    alternating_rounds,
    consumer_main,
    pulsar_client,
    pulsar_module,
    pulsar_publish,
    summary,
)
from _peer_brokers import Nats, Redis

CONSUMER_START_TIMEOUT = 60.0
STAGE_PROBE_DIR = Path(__file__).resolve().parent / "stage_probe"


@dataclass(frozen=True)
class Cell:
    broker: str
    client: str
    batching: bool
    every: int  # a callback on every `every`-th message
    rate: int

    @property
    def name(self) -> str:
        if self.client in ("official", "magnetar"):
            return (f"{self.broker} {self.client} {'batched' if self.batching else 'unbatched'} "
                    f"cb-{'every' if self.every == 1 else 'tenth'} {self.rate}/s")
        return f"{self.broker} {self.rate}/s"


class Consumer:
    """This script again, as the consumer process of one cell."""

    started: list[subprocess.Popen] = []

    def __init__(self, spec: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--consumer", json.dumps(spec)],
                                     stdout=subprocess.PIPE, text=True)
        Consumer.started.append(self.proc)
        line = self._line(CONSUMER_START_TIMEOUT)
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"the consumer did not start: {line!r}")

    def _line(self, timeout: float) -> str:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()))
        reader.start()
        reader.join(timeout)
        return result[0] if result else ""

    def latencies(self) -> list[float]:
        out, _ = self.proc.communicate(timeout=180)
        return json.loads(out.strip().splitlines()[-1]) if out.strip() else []

    @classmethod
    def kill_all(cls) -> None:
        """A cell that failed (or an interrupted run) leaves no consumer behind."""
        for proc in cls.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# ----------------------------------------------------------------- brokers
class MagnetarUnderTest:
    def __init__(self, label: str, work: Path, src: str | None, config: list[str], stages: bool) -> None:
        self.label = label
        self.work = work
        paths = [str(Path(src).resolve())] if src else []
        env = {}
        self.stages = StageProbe(work / "stages.json") if stages else None
        if self.stages is not None:
            paths.insert(0, str(STAGE_PROBE_DIR))
            env["STAGE_PROBE_FILE"] = str(self.stages.path)
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        self.broker = Standalone(work / label, list(config), env=env).start()
        self.pid = self.broker.proc.pid

    def run(self, cell: Cell, topic: str, count: int, skip: int) -> dict:
        module = pulsar_module(cell.client)
        client = pulsar_client(module, self.broker.url)
        topic = f"persistent://public/default/{topic}"
        consumer = Consumer({"kind": "pulsar", "url": self.broker.url, "topic": topic, "count": count,
                             "skip": skip, "client": cell.client})
        before = self.broker_figures()
        disk = {} if self.stages is None else {"disk_write_fdatasync_ms": disk_fsync(self.work)}
        if self.stages is not None:
            self.stages.reset()
        try:
            latencies, lag = pulsar_publish(client, module, topic, cell.batching, cell.every, cell.rate, count, skip,
                                            trace=self.stages is not None and not cell.batching)
        finally:
            client.close()
        e2e = consumer.latencies()
        stages = {}
        if self.stages is not None:
            stages["broker_stages_ms"] = self.stages.read()
            if latencies.trace:
                stages["where_the_time_went_ms"] = where_the_time_went(latencies.trace, self.stages.timeline())
        return {"publish": latencies, "sender_lag_ms": lag, "e2e": e2e, **broker_between(before, self.broker_figures()),
                **disk, **stages}

    def broker_figures(self) -> dict[str, float]:
        return broker_figures(self.broker.admin_url)

    def stop(self) -> None:
        self.broker.stop()


class StageProbe:
    """The figures stage_probe/sitecustomize.py keeps inside a broker (--stages), on request."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _ask(self, suffix: str) -> bool:
        """Request something of the probe; True once it answered (removed the request)."""
        request = Path(f"{self.path}{suffix}")
        request.touch()
        deadline = time.monotonic() + 10
        while request.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not request.exists()

    def reset(self) -> None:
        """Start the figures afresh."""
        self._ask(".reset")

    def read(self) -> dict:
        """The distributions since the last reset."""
        return json.loads(self.path.read_text()) if self._ask(".read") else {}

    def timeline(self) -> dict:
        """Each SEND's moments inside the broker since the last reset, by sequence id, and
        the loop's long turns."""
        if not self._ask(".timeline"):
            return {"sends": {}, "long_turns": []}
        found = json.loads(Path(f"{self.path}.timeline.json").read_text())
        return {"sends": {int(seq): moments for seq, moments in found["sends"].items()},
                "long_turns": found["long_turns"]}


def disk_fsync(directory: Path, count: int = 300) -> dict[str, float | int]:
    """The disk's own figure just before a cell: appending 200 bytes and fdatasync, as the
    sync thread does once per group, `count` times in the broker's directory."""
    path = directory / "disk-probe"
    took = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(count):
            started = time.monotonic()
            os.write(fd, b"x" * 200)
            os.fdatasync(fd)
            took.append((time.monotonic() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return summary(took)


SEGMENTS = ("sender_late", "to_broker", "read_to_handed", "storage_queue", "commit_wait", "write_fsync", "hop",
            "to_receipt", "client_receive", "in_long_turns", "long_turns_cpu")
"""A message's way, cut at the moments the client (scheduled, send began, receipt seen)
and the stage probe (TIMELINE in stage_probe/sitecustomize.py) saw; all but the last two add
up to its publish latency, and those two say how much of it the broker's loop spent in long
turns (see where_the_time_went)."""


def where_the_time_went(trace: list[tuple[int, int, int, int]], timeline: dict) -> dict:
    """Mean and p50 of each segment over all timed messages and over those at or above
    the client-observed p99 (joined by sequence id = the message's index: one unbatched
    producer a cell), and the slowest message's segments: which part the tail is made of.
    `in_long_turns` is how much of a message's way the broker's loop spent in turns working
    over 2 ms, `long_turns_cpu` the CPU those turns used (the rest: waiting for a core)."""
    sends, turns = timeline["sends"], timeline["long_turns"]
    rows = []
    for index, scheduled, sent, seen in trace:
        moments = sends.get(index)
        if moments is None or not all(moments):
            continue
        points = [scheduled / 1e9, sent / 1e9, *moments, seen / 1e9]
        overlap = cpu = 0.0
        for start, end, used in turns:
            share = min(end, points[-1]) - max(start, points[0])
            if share > 0:
                overlap += share
                cpu += used * share / (end - start)
        rows.append([(b - a) * 1000 for a, b in itertools.pairwise(points)] + [overlap * 1000, cpu * 1000])
    if not rows:
        return {}
    rows.sort(key=lambda row: sum(row[:len(SEGMENTS) - 2]))
    tail = rows[int(len(rows) * 0.99):]

    def profile(group: list[list[float]]) -> dict:
        return {name: {"mean": round(sum(r[i] for r in group) / len(group), 3),
                       "p50": round(sorted(r[i] for r in group)[len(group) // 2], 3)}
                for i, name in enumerate(SEGMENTS)}

    return {"joined": len(rows), "all": profile(rows), "at_or_over_p99": {"count": len(tail), **profile(tail)},
            "slowest": {name: round(value, 3) for name, value in zip(SEGMENTS, rows[-1], strict=True)}}


class RedisUnderTest:
    def __init__(self, work: Path) -> None:
        self.server = Redis(work, "always")
        self.label = "redis-always"
        kwargs = self.server.client.connection_pool.connection_kwargs
        self.url = f"{kwargs['host']}:{kwargs['port']}"

    def run(self, cell: Cell, topic: str, count: int, skip: int) -> dict:
        consumer = Consumer({"kind": "redis", "url": self.url, "topic": topic, "count": count, "skip": skip})
        publisher = RedisPipelinedPublisher(self.url)
        try:
            latencies, lag = publisher.publish(topic, cell.rate, count, skip)
        finally:
            publisher.close()
        return {"publish": latencies, "sender_lag_ms": lag, "e2e": consumer.latencies()}

    def stop(self) -> None:
        self.server.stop()


class NatsUnderTest:
    def __init__(self, work: Path) -> None:
        self.server = Nats(work)
        self.label = "nats-jetstream"
        self.url = self.server.nc.connected_url.geturl()
        self.sender = AsyncSender()
        self.nc = self.sender.run(self._connect())

    async def _connect(self):
        import nats  # noqa: PLC0415
        from nats.js.api import StorageType  # noqa: PLC0415

        nc = await nats.connect(self.url)
        self.js = nc.jetstream()
        await self.js.add_stream(name="LATENCY", subjects=["latency.>"], storage=StorageType.FILE)
        return nc

    def run(self, cell: Cell, topic: str, count: int, skip: int) -> dict:
        subject = f"latency.{topic}"
        consumer = Consumer({"kind": "nats", "url": self.url, "topic": subject, "count": count, "skip": skip})
        latencies, lag = self.sender.publish(lambda data: self.js.publish(subject, data), cell.rate, count, skip)
        return {"publish": latencies, "sender_lag_ms": lag, "e2e": consumer.latencies()}

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.sender.run(self.nc.close())
        self.sender.stop()
        self.server.stop()


def peers_here() -> tuple[list[str], dict[str, str]]:
    names, skipped = [], {}
    if shutil.which("redis-server") and importlib.util.find_spec("redis"):
        names.append("redis-always")
    else:
        skipped["redis-always"] = "no redis-server or redis-py (apt-get install redis-server; pip install '.[bench]')"
    if shutil.which("nats-server") and importlib.util.find_spec("nats"):
        names.append("nats-jetstream")
    else:
        skipped["nats-jetstream"] = "no nats-server or nats-py (apt-get install nats-server; pip install '.[bench]')"
    return names, skipped


def cells_for(label: str, args: argparse.Namespace) -> list[Cell]:
    if label in ("redis-always", "nats-jetstream"):
        return [Cell(label, "", False, 1, rate) for rate in args.rate]
    return [Cell(label, client, batching, every, rate)
            for rate in args.rate for client in args.client for batching in args.batching_modes
            for every in args.callback_every]


def measure(broker, cell: Cell, args: argparse.Namespace, serial: int) -> dict:
    count = int(cell.rate * (args.duration + args.warmup))
    skip = int(cell.rate * args.warmup)
    raw = broker.run(cell, f"latency-{serial}", count, skip)
    publish = raw.pop("publish")
    result = {"cell": cell.name, "broker": cell.broker, "client": cell.client or None, "rate": cell.rate,
              "batching": cell.batching if cell.client else None,
              "callback_every": cell.every if cell.client else None,
              "messages_sent": count, "publish_failed": publish.failed,
              "publish_ms": summary(publish.values), "e2e_ms": summary(raw.pop("e2e")),
              "sender_lag_ms_max": round(raw.pop("sender_lag_ms"), 3), **raw}
    expected_e2e = count - skip
    if result["e2e_ms"]["count"] != expected_e2e or publish.failed:
        print(f"warning: {cell.name}: {result['e2e_ms']['count']} of {expected_e2e} consumed, "
              f"{publish.failed} sends failed", file=sys.stderr)
    return result


def start(label: str, work: Path, sources: dict[str, str | None], config: list[str], stages: bool):
    if label == "redis-always":
        return RedisUnderTest(work)
    if label == "nats-jetstream":
        return NatsUnderTest(work)
    return MagnetarUnderTest(label, work, sources[label], config, stages)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3.0, help="seconds timed per cell")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds sent first per cell, not timed")
    parser.add_argument("--rate", type=int, action="append", help="msg/s (repeatable; default 1000 and 10000)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; brokers alternate order between them")
    parser.add_argument("--client", action="append", choices=("official", "magnetar"),
                        help="magnetar's clients to drive (default both)")
    parser.add_argument("--batching", choices=("off", "default", "both"), default="both")
    parser.add_argument("--callback", choices=("every", "tenth", "both"), default="both",
                        help="a real send callback on every message, on every tenth, or both cells")
    parser.add_argument("--magnetar", action="append", metavar="LABEL=SRC",
                        help="a magnetar to run from source tree SRC (repeatable; default: this environment's)")
    parser.add_argument("--no-peers", action="store_true", help="skip redis-server and nats-server")
    parser.add_argument("--stages", action="store_true",
                        help="time the publish path's stages inside each magnetar (benchmarks/stage_probe; "
                             "costs the broker CPU: compare probed with probed)")
    parser.add_argument("-c", dest="config", action="append", default=[], metavar="KEY=VALUE",
                        help="magnetar broker config, as `magnetar standalone -c` (repeatable)")
    args = parser.parse_args()
    if args.duration <= 0 or args.warmup < 0 or args.rounds < 1:
        parser.error("--duration must be > 0, --warmup >= 0 and --rounds >= 1")
    args.rate = args.rate or [1000, 10_000]
    if any(rate < 1 or rate > 100_000 for rate in args.rate):
        parser.error("--rate must be between 1 and 100000 msg/s")
    args.client = args.client or ["official", "magnetar"]
    args.batching_modes = {"off": [False], "default": [True], "both": [False, True]}[args.batching]
    args.callback_every = {"every": [1], "tenth": [10], "both": [1, 10]}[args.callback]
    args.sources = {}
    for item in args.magnetar or ["magnetar="]:
        label, sep, src = item.partition("=")
        if not sep or not label or label in args.sources or label in ("redis-always", "nats-jetstream"):
            parser.error(f"--magnetar {item!r}: give LABEL=SRC, each label once")
        if src and not (Path(src) / "magnetar").is_dir():
            parser.error(f"--magnetar {item!r}: {src} holds no magnetar package")
        args.sources[label] = src or None
    return args


def table(results: list[dict]) -> dict[str, dict[str, str]]:
    def cell(figures: dict) -> str:
        return f"{figures['p50']} / {figures['p99']}" if figures.get("count") else "-"

    return {r["cell"]: {"publish p50 / p99": cell(r["publish_ms"]), "e2e p50 / p99": cell(r["e2e_ms"])}
            for r in results}


def main() -> None:
    args = parse_args()
    peers, skipped = ([], {"peers": "--no-peers"}) if args.no_peers else peers_here()
    labels = [*args.sources, *peers]
    load_start = os.getloadavg()
    results: list[dict] = []
    serial = 0
    with tempfile.TemporaryDirectory(prefix="magnetar-latency-") as tmp:
        for round_no, label, work in alternating_rounds(Path(tmp), labels, args.rounds):
            broker = start(label, work, args.sources, args.config, args.stages)
            try:
                for cell in cells_for(label, args):
                    serial += 1
                    results.append({"round": round_no + 1, **measure(broker, cell, args, serial)})
            finally:
                Consumer.kill_all()
                with contextlib.suppress(Exception):
                    broker.stop()
    print(json.dumps({"python": platform.python_version(), "cpus": os.cpu_count(), "payload_bytes": 100,
                      "duration_s": args.duration, "warmup_s": args.warmup, "rounds": args.rounds,
                      "magnetar": args.sources, "magnetar_config": args.config, "skipped": skipped,
                      "loadavg_start": [round(x, 2) for x in load_start],
                      "loadavg_end": [round(x, 2) for x in os.getloadavg()],
                      "table": table(results), "cells": results}, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--consumer":
        consumer_main(sys.argv[2])
    else:
        main()
