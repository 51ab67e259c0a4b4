"""What an unauthenticated client that does not read its answers costs the broker in
memory (issue 40, item 9), side by side for several source trees (say main's and a branch's).

For each tree (`--src DIR`, first on the broker's PYTHONPATH) a fresh `magnetar standalone`
with token authentication on, holding one 3 MB message, is sent on `--connections`
connections at once, each with a 4 KB receive buffer never read: three peeks at that message
(with the super user's token: their answers outgrow the socket's buffers, so the broker stops
answering), `--pipelined` GETs without credentials, then `--uploads` function uploads of
64 MiB each without credentials (POST /admin/v3/functions/..., Content-Length 64 MiB, no
`Expect: 100-continue`), written until the broker stops reading them. The broker's resident
memory is read before, once every connection is stalled (`attack_mb`), and after the clients
left (once the broker's connections are closed, then `--settle` seconds later). With
`--deep N`, then: N connections each write 14,000 GETs of 19 bytes at once (what 256 KB reads
hold) and read nothing (`deep_*_mb`: before, with them open, after they left).

    .venv/bin/python benchmarks/hostile_http_bench.py --src /work/main/src --src src

Prints one JSON object, with the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
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

import jwt
import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import established, rss_kb
from standalone import Standalone

UPLOAD = 64 * 1024 * 1024
CHUNK = 1024 * 1024


def attack(admin_url: str, token: str, pipelined: int, uploads: int, stalled: threading.Event) -> None:
    """One connection: the peeks, the GETs, then the uploads, until a write blocks for 2 s
    (the broker stopped reading) or all is written."""
    parts = urlsplit(admin_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((parts.hostname, parts.port))
    sock.settimeout(2)
    head = (b"POST /admin/v3/functions/public/default/f%d HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n")
    chunk = b"x" * CHUNK
    peek = (f"GET /admin/v2/persistent/public/default/big/examinemessage?initialPosition=earliest HTTP/1.1\r\n"
            f"Host: x\r\nAuthorization: Bearer {token}\r\n\r\n").encode()
    try:
        sock.sendall(peek * 3 + b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n\r\n" * pipelined)
        for n in range(uploads):
            sock.sendall(head % (n, UPLOAD))
            for _ in range(UPLOAD // CHUNK):
                sock.sendall(chunk)
    except (TimeoutError, OSError):
        pass
    stalled.set()
    stalled.wait_closed.wait()  # type: ignore[attr-defined]
    sock.close()


def deep_pipelining(admin_url: str, pid: int, port: int, connections: int) -> dict[str, float]:
    parts = urlsplit(admin_url)
    before, socks = rss_kb(pid) / 1024, []
    for _ in range(connections):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((parts.hostname, parts.port))
        sock.settimeout(2)
        with contextlib.suppress(TimeoutError):
            sock.sendall(b"GET /x HTTP/1.1\r\n\r\n" * 14_000)
        socks.append(sock)
    time.sleep(2)  # a benchmark's settling time: what is measured is what the broker then holds
    during = rss_kb(pid) / 1024
    for sock in socks:
        sock.close()
    deadline = time.monotonic() + 30
    while established(pid, port) and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"deep_before_mb": round(before, 1), "deep_open_mb": round(during, 1),
            "deep_after_mb": round(rss_kb(pid) / 1024, 1)}


def run(src: str, connections: int, pipelined: int, uploads: int, settle: float, deep: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "secret.key"
        key.write_bytes(secrets.token_bytes(32))
        token = jwt.encode({"sub": "admin"}, key.read_bytes(), algorithm="HS256")
        env = {"PYTHONPATH": os.pathsep.join([str(Path(src).resolve()), os.environ.get("PYTHONPATH", "")])}
        config = ["authenticationEnabled=true", "authenticationProviders=token", "authorizationEnabled=true",
                  "superUserRoles=admin", f"tokenSecretKey=file://{key}"]
        broker = Standalone(Path(tmp) / "data", config, env=env).start()
        pid = broker.proc.pid
        port = urlsplit(broker.admin_url).port
        try:
            client = pulsar.Client(broker.url, authentication=pulsar.AuthenticationToken(token),
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            client.create_producer("persistent://public/default/big", batching_enabled=False).send(b"m" * (3 << 20))
            client.close()
            before = rss_kb(pid) / 1024
            done = threading.Event()
            events, threads = [], []
            for _ in range(connections):
                stalled = threading.Event()
                stalled.wait_closed = done  # type: ignore[attr-defined]
                events.append(stalled)
                threads.append(threading.Thread(target=attack,
                                                args=(broker.admin_url, token, pipelined, uploads, stalled)))
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
            while established(pid, port) and time.monotonic() < deadline:
                time.sleep(0.05)
            closed_mb = rss_kb(pid) / 1024
            time.sleep(settle)
            result = {"before_mb": round(before, 1), "attack_mb": round(attack_mb, 1),
                      "stalled_after_s": round(stalled_after, 1), "after_close_mb": round(closed_mb, 1),
                      f"after_{settle:g}s_mb": round(rss_kb(pid) / 1024, 1)}
            return {**result, **(deep_pipelining(broker.admin_url, pid, port, deep) if deep else {})}
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", action="append", required=True, help="a source tree (its src/ directory)")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--pipelined", type=int, default=4,
                        help="GETs between the peeks and the uploads (more than 8 keep the uploads unread)")
    parser.add_argument("--uploads", type=int, default=4)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the clients left")
    parser.add_argument("--deep", type=int, default=0, help="connections of 14,000 pipelined GETs each")
    args = parser.parse_args()
    report: dict[str, object] = {"load_before": os.getloadavg()}
    report["runs"] = {src: {str(n): run(src, n, args.pipelined, args.uploads, args.settle, args.deep)
                            for n in sorted({1, args.connections})} for src in args.src}
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
