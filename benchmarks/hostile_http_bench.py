"""What an unauthenticated client that does not read its answers costs the broker in
memory (issue 40, item 9), side by side for several source trees (say main's and a branch's).

For each tree (`--src DIR`, first on the broker's PYTHONPATH) a fresh `magnetar standalone`
with token authentication on is sent, on `--connections` connections at once and without
credentials: `--pipelined` small GETs (answers never read), then `--uploads` function
uploads of 64 MiB each (POST /admin/v3/functions/..., Content-Length 64 MiB, no
`Expect: 100-continue`), written until the broker stops reading them. The broker's resident
memory is read before, once every connection is stalled (`attack_mb`), and after the clients
left (`after_mb`: once the broker's connections are closed, then `--settle` seconds later).

    .venv/bin/python benchmarks/hostile_http_bench.py --src /work/main/src --src src

Prints one JSON object, with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import rss_kb
from standalone import Standalone

UPLOAD = 64 * 1024 * 1024
CHUNK = 1024 * 1024


def attack(admin_url: str, pipelined: int, uploads: int, stalled: threading.Event) -> None:
    """One connection: the GETs, then the uploads, until a write blocks for 2 s (the broker
    stopped reading) or all is written."""
    parts = urlsplit(admin_url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.settimeout(2)
    head = (b"POST /admin/v3/functions/public/default/f%d HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n")
    chunk = b"x" * CHUNK
    try:
        sock.sendall(b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n\r\n" * pipelined)
        for n in range(uploads):
            sock.sendall(head % (n, UPLOAD))
            for _ in range(UPLOAD // CHUNK):
                sock.sendall(chunk)
    except (TimeoutError, OSError):
        pass
    stalled.set()
    stalled.wait_closed.wait()  # type: ignore[attr-defined]
    sock.close()


def connections_of(pid: int, port: int) -> int:
    """The broker's TCP connections on `port` that are established (from /proc/PID/net/tcp)."""
    count = 0
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if int(local.split(":")[1], 16) == port and state == "01":
            count += 1
    return count


def run(src: str, connections: int, pipelined: int, uploads: int, settle: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "secret.key"
        key.write_bytes(secrets.token_bytes(32))
        env = {"PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), os.environ.get("PYTHONPATH", "")])}
        config = ["authenticationEnabled=true", "authenticationProviders=token", "authorizationEnabled=true",
                  "superUserRoles=admin", f"tokenSecretKey=file://{key}"]
        broker = Standalone(Path(tmp) / "data", config, env=env).start()
        pid = broker.proc.pid
        port = urlsplit(broker.admin_url).port
        try:
            before = rss_kb(pid) / 1024
            done = threading.Event()
            events, threads = [], []
            for _ in range(connections):
                stalled = threading.Event()
                stalled.wait_closed = done  # type: ignore[attr-defined]
                events.append(stalled)
                threads.append(threading.Thread(target=attack, args=(broker.admin_url, pipelined, uploads, stalled)))
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for stalled in events:
                stalled.wait()
            attack_mb, stalled_after = rss_kb(pid) / 1024, time.perf_counter() - start
            done.set()
            for thread in threads:
                thread.join()
            deadline = time.monotonic() + 30
            while connections_of(pid, port) and time.monotonic() < deadline:
                time.sleep(0.05)
            closed_mb = rss_kb(pid) / 1024
            time.sleep(settle)
            return {"before_mb": round(before, 1), "attack_mb": round(attack_mb, 1),
                    "stalled_after_s": round(stalled_after, 1), "after_close_mb": round(closed_mb, 1),
                    f"after_{settle:g}s_mb": round(rss_kb(pid) / 1024, 1)}
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", required=True, help="a source tree (its src/ directory)")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--pipelined", type=int, default=740)
    parser.add_argument("--uploads", type=int, default=4)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the clients left")
    args = parser.parse_args()
    report: dict[str, object] = {"load_before": os.getloadavg()}
    report["runs"] = {src: {str(n): run(src, n, args.pipelined, args.uploads, args.settle)
                            for n in sorted({1, args.connections})} for src in args.src}
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
