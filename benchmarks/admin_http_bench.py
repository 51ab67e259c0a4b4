"""Admin API requests per second and the broker's CPU per request, side by side for several
installs (say main's venv and a branch's), as scripts and monitoring call it.

Each round starts `PYTHON -m magnetar standalone` per install (fresh data directory, free
ports) and times, with the standard library's http.client:
- `keepalive_get`: GET /admin/v2/persistent/public/default/t/stats on one kept-alive
  connection (what monitoring and pulsar-admin do);
- `new_connection_get`: GET /admin/v2/clusters, a connection each (what curl in a script does);
- `policy_post`: POST .../namespaces/public/default/messageTTL with a JSON body, kept alive.
The broker's CPU is read from /proc around each phase. Rounds alternate the installs
(A B A B ...) so drift in the machine's speed falls on both; prints one JSON object with the
load average before and after.

    .venv/bin/python benchmarks/admin_http_bench.py --python /work/main/.venv/bin/python \
        --python .venv/bin/python --requests 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import cpu_seconds

ADMIN = re.compile(r"admin API on http://([\d.]+):(\d+)")
READY = "accepting connections on "


def start(python: str, data_dir: Path) -> tuple[subprocess.Popen[str], str, int]:
    args = [python, "-m", "magnetar", "standalone", "--data-dir", str(data_dir), "--port", "0", "--http-port", "0"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    address = None
    for line in proc.stdout:
        if match := ADMIN.search(line):
            address = match.group(1), int(match.group(2))
        if READY in line and address is not None:
            # each change is an INFO line: read them all, or the broker blocks on a full pipe
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc, *address
    raise SystemExit(f"{python}: the broker exited with {proc.wait()} before accepting connections")


def keepalive(host: str, port: int, method: str, path: str, body: bytes | None, count: int) -> None:
    connection = http.client.HTTPConnection(host, port, timeout=30)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    for _ in range(count):
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status >= 300:
            raise SystemExit(f"{method} {path}: {response.status}")
    connection.close()


def new_connections(host: str, port: int, path: str, count: int) -> None:
    for _ in range(count):
        keepalive(host, port, "GET", path, None, 1)


def measure(pid: int, count: int, run: Callable[[], None]) -> tuple[float, float]:
    """(requests per second, broker CPU microseconds per request)."""
    cpu, started = cpu_seconds(pid), time.perf_counter()
    run()
    wall, used = time.perf_counter() - started, cpu_seconds(pid) - cpu
    return count / wall, used / count * 1e6


def one_round(python: str, data_dir: Path, count: int) -> dict[str, tuple[float, float]]:
    proc, host, port = start(python, data_dir)
    try:
        ns = "/admin/v2/namespaces/public/default"
        topic = "/admin/v2/persistent/public/default/t"
        keepalive(host, port, "PUT", topic, None, 1)
        keepalive(host, port, "GET", topic + "/stats", None, 50)  # warm-up
        return {
            "keepalive_get": measure(proc.pid, count, lambda: keepalive(host, port, "GET", topic + "/stats", None,
                                                                        count)),
            "new_connection_get": measure(proc.pid, count // 4,
                                          lambda: new_connections(host, port, "/admin/v2/clusters", count // 4)),
            "policy_post": measure(proc.pid, count, lambda: keepalive(host, port, "POST", ns + "/messageTTL", b"60",
                                                                      count)),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", default=[], help="an interpreter with magnetar installed "
                                                                       "(repeat to compare; default: this one)")
    parser.add_argument("--requests", type=int, default=3000, help="requests per phase (a fourth of them with a "
                                                                   "new connection each)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.requests < 4 or args.rounds < 1:
        parser.error("--requests must be at least 4 and --rounds at least 1")
    pythons = args.python or [sys.executable]
    figures: dict[str, list[dict[str, tuple[float, float]]]] = {python: [] for python in pythons}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="magnetar-admin-bench-") as tmp:
        for round_ in range(args.rounds):
            for n, python in enumerate(pythons):
                figures[python].append(one_round(python, Path(tmp) / f"{round_}-{n}", args.requests))
    result = {
        "requests": args.requests, "rounds": args.rounds, "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "installs": [{"python": python, **{
            phase: {"requests_per_s": round(statistics.median(r[phase][0] for r in rounds)),
                    "broker_cpu_us_per_request": round(statistics.median(r[phase][1] for r in rounds), 1)}
            for phase in rounds[0]}} for python, rounds in figures.items()],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
