"""Start-up time and idle memory of `magnetar standalone`, side by side for several installs.

Each run starts `PYTHON -m magnetar standalone` on free ports in a fresh data directory
and times process start to two log lines (read from a pipe as they are written, so no
polling delay is counted): "binary protocol listener ready" (`binary_ready_s`: Pulsar
clients are served from then on, while the admin API's code loads in a thread) and
"accepting connections" (`startup_s`: both the binary port and the admin HTTP API serve).
An install that logs no earlier line serves both at once, and its two times are equal.
At the second it reads the CPU time the broker had used (steadier than wall time on a
shared machine, in 10 ms clock ticks); one second later the broker's resident memory
(VmRSS), then stops it. With several `--python` (say main's venv and a branch's) the
runs alternate A B A B ..., so drift in the machine's speed falls on both,
and the ratios to the first are taken run by run. Prints one JSON object, with the load
average before and after.

Python caches compiled modules as a user's install does (each install in a bytecode
cache of its own under the temporary directory, which the warm-up run fills), even
where the environment sets PYTHONDONTWRITEBYTECODE. With --no-bytecode-cache it does
not: an editable install's source (magnetar's own) is then compiled at every start, as
happens in a checkout run with PYTHONDONTWRITEBYTECODE=1, and the start-up time grows
with the amount of magnetar code imported.

    .venv/bin/python benchmarks/startup_bench.py --python /work/main/.venv/bin/python \
        --python .venv/bin/python --runs 9
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import cpu_seconds, rss_kb

READY = "accepting connections on "
BINARY_READY = "binary protocol listener ready on "
SETTLE_SECONDS = 1.0  # start-up garbage is collected and frozen (broker/collector.py) by then


def one_run(python: str, data_dir: Path, config: list[str],
            bytecode: Path | None) -> tuple[float, float, float, float]:
    """(seconds to the binary port serving, seconds to both APIs serving, CPU seconds by then,
    idle RSS in MB) of one broker."""
    args = [python, "-m", "magnetar", "standalone", "--data-dir", str(data_dir), "--port", "0", "--http-port", "0"]
    for item in config:
        args += ["-c", item]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONUNBUFFERED="1")
    env.update({"PYTHONPYCACHEPREFIX": str(bytecode)} if bytecode else {"PYTHONDONTWRITEBYTECODE": "1"})
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert proc.stdout is not None
        binary = None
        for line in proc.stdout:
            if BINARY_READY in line:
                binary = time.perf_counter() - started
            if READY in line:
                seconds, cpu = time.perf_counter() - started, cpu_seconds(proc.pid)
                break
        else:
            raise SystemExit(f"{python}: the broker exited with {proc.wait()} before accepting connections")
        time.sleep(SETTLE_SECONDS)  # a measuring pause, not synchronisation
        return seconds if binary is None else binary, seconds, cpu, rss_kb(proc.pid) / 1024
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def summary(values: list[float], digits: int) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "min": round(min(values), digits),
            "max": round(max(values), digits)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", default=[],
                        help="an interpreter with magnetar installed (repeat to compare; default: this one)")
    parser.add_argument("--runs", type=int, default=7, help="counted runs of each (after one warm-up each)")
    parser.add_argument("-c", dest="config", action="append", default=[], metavar="KEY=VALUE",
                        help="configuration for every broker")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="compile what has no .pyc at every start (PYTHONDONTWRITEBYTECODE=1)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, not {args.runs}")
    pythons = args.python or [sys.executable]
    figures: dict[str, dict[str, list[float]]] = {
        python: {"binary_ready_s": [], "startup_s": [], "startup_cpu_s": [], "idle_rss_mb": []} for python in pythons}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="magnetar-startup-") as tmp:
        for run in range(args.runs + 1):
            for n, python in enumerate(pythons):
                bytecode = None if args.no_bytecode_cache else Path(tmp) / f"pycache-{n}"
                measured = one_run(python, Path(tmp) / f"{run}-{n}", args.config, bytecode)
                if run:  # the first round warms the file cache and the bytecode
                    for values, value in zip(figures[python].values(), measured, strict=True):
                        values.append(value)
    result: dict[str, object] = {
        "runs": args.runs, "config": args.config, "bytecode_cache": not args.no_bytecode_cache, "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "installs": [{"python": python, **{name: summary(values, 3) for name, values in figures[python].items()}}
                     for python in pythons],
    }
    if len(pythons) > 1:
        base = figures[pythons[0]]
        result["ratios_to_first"] = [
            {"python": python, **{name: summary([b / a for a, b in zip(base[name], values, strict=True)], 3)
                                  for name, values in figures[python].items()}}
            for python in pythons[1:]]
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
