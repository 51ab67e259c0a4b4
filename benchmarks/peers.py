"""magnetar beside redis-server (streams) and nats-server (JetStream), same workloads, one run.

    .venv/bin/python benchmarks/peers.py --plot docs/peers.png                 # ~6 min
    .venv/bin/python benchmarks/peers.py --messages 50000 --runs 1             # ~1 min
    apt-get install -y redis-server nats-server; pip install -e '.[bench]'     # the peers

Four workloads of 100-byte messages against each broker this machine has: produce
batched, produce unbatched, consume with an ack per message, consume with a cumulative
ack (both consumes read what the batched produce stored). Each broker is started by the
script on a free port with its own temp dir, once per run; a peer whose server or Python
client is missing is skipped and says so.

Prints ONE JSON object: per workload and broker the median over the runs of broker
CPU-s per million messages (utime+stime of all its threads from /proc), client CPU-s per
million (this process, the official client's C++ threads included) and msg/s; and per
workload magnetar's broker CPU and msg/s over each peer's (CPU below 1: magnetar's broker is cheaper).
`_peer_brokers.py` says what each workload means for each broker.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _broker_process import Meter
from _peer_brokers import READ_BATCH, Magnetar, Nats, Peer, Redis

WORKLOADS: dict[str, Callable[[Peer, int], int]] = {
    "produce_batched": lambda peer, n: peer.produce(True, n),
    "produce_unbatched": lambda peer, n: peer.produce(False, n),
    "consume_ack_each": lambda peer, n: peer.consume(False, n),
    "consume_cumulative": lambda peer, n: peer.consume(True, n),
}
METRICS = ("broker_cpu_s_per_M", "client_cpu_s_per_M", "msg_s")


def available(config: list[str]) -> tuple[dict[str, Callable[[Path], Peer]], dict[str, str]]:
    """The brokers that can run here, each as a way to start it; and why the others can't."""
    starters: dict[str, Callable[[Path], Peer]] = {"magnetar": lambda work: Magnetar(work, config)}
    skipped: dict[str, str] = {}
    if not shutil.which("redis-server"):
        skipped["redis"] = "no redis-server on PATH (apt-get install redis-server)"
    elif importlib.util.find_spec("redis") is None:
        skipped["redis"] = "no redis-py (pip install -e '.[bench]')"
    else:
        starters["redis-always"] = lambda work: Redis(work, "always")
        starters["redis-everysec"] = lambda work: Redis(work, "everysec")
    if not shutil.which("nats-server"):
        skipped["nats"] = "no nats-server on PATH (apt-get install nats-server)"
    elif importlib.util.find_spec("nats") is None:
        skipped["nats"] = "no nats-py (pip install -e '.[bench]')"
    else:
        starters["nats-jetstream"] = Nats
    return starters, skipped


def measure(peer: Peer, workload: str, count: int) -> dict:
    with Meter(peer.pid) as meter:
        done = WORKLOADS[workload](peer, count)
    if done != count:
        print(f"warning: {peer.name} {workload}: {done} of {count} messages", file=sys.stderr)
    per_m = 1e6 / done if done else 0.0
    return {"messages": done, "seconds": round(meter.wall, 3),
            "broker_cpu_s_per_M": round(meter.cpu[peer.pid] * per_m, 2),
            "client_cpu_s_per_M": round(meter.own_cpu * per_m, 2),
            "msg_s": round(done / meter.wall) if meter.wall else 0}


def one_run(start: Callable[[Path], Peer], count: int) -> dict[str, dict]:
    """A fresh broker in a fresh dir, the four workloads in order."""
    with tempfile.TemporaryDirectory(prefix="magnetar-peers-") as tmp:
        peer = start(Path(tmp))
        try:
            return {workload: measure(peer, workload, count) for workload in WORKLOADS}
        finally:
            with contextlib.suppress(Exception):
                peer.stop()


def medians(runs: list[dict[str, dict]]) -> dict[str, dict]:
    return {workload: {metric: round(statistics.median(run[workload][metric] for run in runs), 2)
                       for metric in METRICS}
            for workload in WORKLOADS}


def ratios(table: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """Per workload and peer: magnetar's broker CPU and msg/s over the peer's (as the issue quotes them)."""
    out: dict[str, dict[str, dict]] = {}
    for workload, row in table.items():
        ours = row["magnetar"]
        out[workload] = {name: {f"magnetar_{metric}_over_peer": _ratio(ours[metric], theirs[metric])
                                for metric in ("broker_cpu_s_per_M", "msg_s")}
                         for name, theirs in row.items() if name != "magnetar"}
    return out


def _ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 2) if theirs else None


def plot(table: dict[str, dict[str, dict]], path: Path, subtitle: str) -> None:
    """Three panels (broker CPU, client CPU, msg/s), a group of bars per workload."""
    import matplotlib  # noqa: PLC0415 (a dev dependency, only needed for --plot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import matplotlib.ticker  # noqa: PLC0415

    workloads = list(table)
    brokers = list(table[workloads[0]])
    width = 0.8 / len(brokers)
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    titles = {"broker_cpu_s_per_M": "broker CPU-s per million (log, lower is better)",
              "client_cpu_s_per_M": "client CPU-s per million (lower is better)",
              "msg_s": "messages per second (higher is better)"}
    for ax, metric in zip(axes, METRICS, strict=True):
        for i, broker in enumerate(brokers):
            xs = [w + (i - (len(brokers) - 1) / 2) * width for w in range(len(workloads))]
            bars = ax.bar(xs, [table[w][broker][metric] for w in workloads], width, label=broker)
            labels = [f"{v / 1000:.0f}k" if metric == "msg_s" else f"{v:.3g}" for v in bars.datavalues]
            ax.bar_label(bars, labels=labels, fontsize=6, rotation=90, padding=2)
        ax.set_title(titles[metric], fontsize=10)
        ax.set_xticks(range(len(workloads)), [w.replace("_", "\n", 1) for w in workloads], fontsize=8)
        ax.margins(y=0.2)
        if metric == "broker_cpu_s_per_M":
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].legend(fontsize=8)
    fig.suptitle(f"magnetar and peers, 100-byte messages ({subtitle})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per workload")
    parser.add_argument("--runs", type=int, default=3, help="runs per broker; the table has the medians")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="just these brokers (magnetar, redis-always, redis-everysec, nats-jetstream)")
    parser.add_argument("-c", dest="config", action="append", default=[], metavar="KEY=VALUE",
                        help="magnetar broker config, as `magnetar standalone -c` (repeatable)")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="draw the table here")
    args = parser.parse_args()
    if args.messages < READ_BATCH or args.runs < 1:
        parser.error(f"--messages must be >= {READ_BATCH} and --runs >= 1")

    starters, skipped = available(args.config)
    if args.only:
        unknown = set(args.only) - set(starters) - {"redis-always", "redis-everysec", "nats-jetstream"}
        if unknown:
            parser.error(f"--only: unknown broker(s) {sorted(unknown)}")
        starters = {name: start for name, start in starters.items() if name in args.only or name == "magnetar"}
    load_start = os.getloadavg()
    runs: dict[str, list[dict]] = {name: [] for name in starters}
    for _ in range(args.runs):  # brokers interleaved, so drifting load hits them alike
        for name, start in starters.items():
            runs[name].append(one_run(start, args.messages))
    per_broker = {name: medians(broker_runs) for name, broker_runs in runs.items()}
    table = {workload: {name: per_broker[name][workload] for name in starters} for workload in WORKLOADS}
    result = {"python": platform.python_version(), "cpus": os.cpu_count(), "payload_bytes": 100,
              "messages_per_workload": args.messages, "runs": args.runs, "magnetar_config": args.config,
              "loadavg_start": [round(x, 2) for x in load_start],
              "loadavg_end": [round(x, 2) for x in os.getloadavg()],
              "skipped": skipped, "table": table, "ratios": ratios(table), "all_runs": runs}
    if args.plot:
        plot(table, args.plot, f"{args.messages:,} per workload, median of {args.runs}")
        result["plot"] = str(args.plot)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
