"""Does a message cost the broker as much in its twentieth round as in its first?

    .venv/bin/python benchmarks/broker_soak.py                                  # 20 rounds, ~15 min
    .venv/bin/python benchmarks/broker_soak.py --rounds 3 --unbatched 20000 --batched 100000   # ~1 min
    .venv/bin/python benchmarks/broker_soak.py -c managedLedgerCacheSizeMB=16 --json /tmp/soak.json

One `magnetar standalone` for the whole run. Each round sends N unbatched and M batched
100-byte messages with the official client (send_async with a counting callback, 5,000
pending, blocking when full), half of each to a topic that lives for the whole run and half
to a topic new in that round (its producer closed at the end of the round), so both what a
long-lived topic accumulates and what a finished topic leaves behind show up.

After each round it prints one JSON line: broker CPU-s per million messages (utime+stime
of all its threads from /proc, unbatched and batched apart: they differ 30-fold), msg/s,
and the broker's RSS and open fds. The last line is a summary: last round over first for CPU, and the
RSS growth. The issue's aim: last within 10% of the first; RSS bounded by the caches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _broker_process import (
    Meter,
    Standalone,
    official_client,
    open_fds,
    produce,
    producer_options,
    rss_mb,
    start_standalone,
)

SAME = "persistent://public/default/soak-same-{kind}"
NEW = "persistent://public/default/soak-r{round}-{kind}"


def per_million(cpu: float, messages: int) -> float:
    return round(cpu * 1e6 / messages, 2) if messages else 0.0


class Soak:
    """One broker, one client, and the producers of the long-lived topics across rounds."""

    def __init__(self, broker: Standalone) -> None:
        self.broker = broker
        self.pid = broker.proc.pid
        self.client = official_client(broker.url)
        self.same = {kind: self.client.create_producer(SAME.format(kind=kind), **producer_options(kind == "batched"))
                     for kind in ("unbatched", "batched")}

    def phase(self, producer, count: int) -> dict:
        with Meter(self.pid) as meter:
            result = produce(producer, count)
        return {"sent": result.sent, "failed": result.failed, "seconds": result.seconds,
                "broker_cpu_s": meter.cpu[self.pid], "client_cpu_s": meter.own_cpu}

    def workload(self, round_no: int, kind: str, count: int) -> dict:
        """`count` messages of one kind: half to the long-lived topic, half to this round's new one."""
        same = self.phase(self.same[kind], count // 2)
        fresh_producer = self.client.create_producer(NEW.format(round=round_no, kind=kind),
                                                     **producer_options(kind == "batched"))
        fresh = self.phase(fresh_producer, count - count // 2)
        fresh_producer.close()
        sent = same["sent"] + fresh["sent"]
        seconds = same["seconds"] + fresh["seconds"]
        return {
            "broker_cpu_s_per_M": per_million(same["broker_cpu_s"] + fresh["broker_cpu_s"], sent),
            "msg_s": round(sent / seconds) if seconds else 0,
            "same_topic_cpu_s_per_M": per_million(same["broker_cpu_s"], same["sent"]),
            "new_topic_cpu_s_per_M": per_million(fresh["broker_cpu_s"], fresh["sent"]),
            "client_cpu_s_per_M": per_million(same["client_cpu_s"] + fresh["client_cpu_s"], sent),
            "failed": same["failed"] + fresh["failed"],
        }

    def round(self, round_no: int, unbatched: int, batched: int) -> dict:
        line: dict = {"round": round_no}
        if unbatched:
            line["unbatched"] = self.workload(round_no, "unbatched", unbatched)
        if batched:
            line["batched"] = self.workload(round_no, "batched", batched)
        line["broker_rss_mb"] = round(rss_mb(self.pid), 1)
        line["broker_open_fds"] = open_fds(self.pid)  # a finished topic that keeps its files shows here
        line["loadavg_1m"] = round(os.getloadavg()[0], 2)
        return line

    def close(self) -> None:
        self.client.close()


def summary(rounds: list[dict], config: list[str]) -> dict:
    first, last = rounds[0], rounds[-1]
    result: dict = {"summary": True, "rounds": len(rounds), "config": config,
                    "rss_mb_first": first["broker_rss_mb"], "rss_mb_last": last["broker_rss_mb"],
                    "rss_mb_max": max(r["broker_rss_mb"] for r in rounds),
                    "rss_growth_mb": round(last["broker_rss_mb"] - first["broker_rss_mb"], 1),
                    "failed": sum(r[k]["failed"] for r in rounds for k in ("unbatched", "batched") if k in r)}
    for kind in ("unbatched", "batched"):
        if kind not in first:
            continue
        a, b = first[kind]["broker_cpu_s_per_M"], last[kind]["broker_cpu_s_per_M"]
        result[kind] = {"cpu_s_per_M_first": a, "cpu_s_per_M_last": b,
                        "cpu_s_per_M_min": min(r[kind]["broker_cpu_s_per_M"] for r in rounds),
                        "cpu_s_per_M_max": max(r[kind]["broker_cpu_s_per_M"] for r in rounds),
                        "last_over_first": round(b / a, 2) if a else None,
                        "within_10pct": bool(a) and b <= 1.1 * a}
    return result


def emit(line: dict) -> None:
    print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--unbatched", type=int, default=100_000, help="unbatched messages per round")
    parser.add_argument("--batched", type=int, default=1_000_000, help="batched messages per round")
    parser.add_argument("-c", dest="config", action="append", default=[], metavar="KEY=VALUE",
                        help="broker config, as `magnetar standalone -c` (repeatable)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every round and the summary here")
    args = parser.parse_args()
    if args.rounds < 1 or args.unbatched < 0 or args.batched < 0 or not (args.unbatched or args.batched):
        parser.error("--rounds must be >= 1 and --unbatched/--batched >= 0, not both 0")

    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="magnetar-soak-") as tmp:
        broker = start_standalone(Path(tmp) / "data", args.config)
        emit({"start": True, "broker_pid": broker.proc.pid, "idle_rss_mb": round(rss_mb(broker.proc.pid), 1),
              "config": args.config, "unbatched": args.unbatched, "batched": args.batched,
              "payload_bytes": 100, "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]})
        soak = Soak(broker)
        started = time.monotonic()
        try:
            for round_no in range(1, args.rounds + 1):
                rounds.append(soak.round(round_no, args.unbatched, args.batched))
                emit(rounds[-1])
        finally:
            soak.close()
            alive = broker.proc.poll() is None
            broker.stop()
    result = summary(rounds, args.config)
    result["broker_alive_at_end"] = alive
    result["wall_s"] = round(time.monotonic() - started, 1)
    emit(result)
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "summary": result}, indent=1))
    if not alive:
        sys.exit("broker died during the soak")


if __name__ == "__main__":
    main()
