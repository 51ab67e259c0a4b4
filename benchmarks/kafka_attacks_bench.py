"""What one hostile Kafka client costs the broker (issue 40 items 5-7), and an unrelated admin request beside it.

    .venv/bin/python benchmarks/kafka_attacks_bench.py [--only NAME ...]

Each attack runs against a fresh `magnetar standalone --kafka` (SASL with token authentication
for the pre-authentication ones), from raw sockets, as the issue's attacker did:

- repeated-partitions: a Fetch v4 naming partition 0 of a 4 MiB partition 200 times
  (partition_max_bytes 1 MiB, max_bytes 64 KiB), sent 5 times, each answer read;
- unread-fetches: 300 pipelined 1 MiB Fetches on one connection whose answers are never read;
- pre-auth-frames: 40 unauthenticated connections each sending 5.3 MB of one unfinished frame
  (its size prefix the most the listener takes);
- idle-pre-auth: 2,000 connections that never send a byte, the broker set to
  brokerMaxConnectionsPerIp=100 and connectionMaxIdleMs=3000 (both unlimited by default);
- pre-auth-flood: 150,000 pipelined ApiVersions before authentication, answers unread.

Meanwhile a thread asks the admin API for the cluster list every 20 ms. Prints ONE JSON object:
per attack, the broker's RSS before and at its peak (MB), the admin requests' p50 and max
latency (ms), and what the attack achieved (bytes answered, connections still open). Run it
with PYTHONPATH pointing at another tree to measure that tree's broker.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import secrets
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import jwt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kafka"))
from kafka_brokers import RawKafka, batch
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.fetch.v4 import request as fetch_v4
from procfs import rss_kb
from standalone import Standalone

from magnetar.kafka.protocol.messages import encode_request

MB = 1024 * 1024
FRAME_LIMIT = 5 * MB + 64 * 1024
LIMITS = ("brokerMaxConnectionsPerIp=100", "connectionMaxIdleMs=3000")
"""Set on the SASL broker as an operator would (the defaults, Kafka's and Pulsar's, limit nothing)."""
LISTENER_LINE = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+) \((\w+)\)")


class AdminProbe:
    """Times `GET /admin/v2/clusters` every 20 ms in a thread, and samples the broker's RSS."""

    def __init__(self, broker: Standalone, headers: dict[str, str]) -> None:
        self._url = f"{broker.admin_url}/admin/v2/clusters"
        self._headers = headers
        self._pid = broker.proc.pid
        self.latencies: list[float] = []
        self.peak_kb = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True),
                         threading.Thread(target=self._sample, daemon=True)]

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak_kb = max(self.peak_kb, rss_kb(self._pid))

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(self._url, headers=self._headers), timeout=60) as r:
                r.read()
            self.latencies.append(time.perf_counter() - started)
            self._stop.wait(0.02)

    def __enter__(self) -> AdminProbe:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)
        self.peak_kb = max(self.peak_kb, rss_kb(self._pid))

    def figures(self) -> dict[str, float]:
        ms = sorted(1000 * x for x in self.latencies) or [0.0]
        return {"admin_p50_ms": round(statistics.median(ms), 1), "admin_max_ms": round(ms[-1], 1),
                "admin_requests": len(self.latencies)}


def _kafka_port(broker: Standalone, scheme: str) -> int:
    return int(next(port for port, name in LISTENER_LINE.findall(broker.log()) if name == scheme))


def _fill(bootstrap: str, topic: str, megabytes: int) -> None:
    raw = RawKafka(bootstrap)
    raw.create_topic(topic)
    value = b"x" * 1000
    for _ in range(megabytes * 64):  # 16 KB batches
        assert raw.produce(topic, batch([value] * 16))[0] == 0
    raw.close()


def _fetch_v4(topic: str, partitions: int, max_bytes: int, partition_max: int) -> fetch_v4.FetchRequest:
    return fetch_v4.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=max_bytes,
                                 isolation_level=0, topics=(fetch_v4.FetchTopic(topic=topic, partitions=tuple(
                                     fetch_v4.FetchPartition(partition=0, fetch_offset=0,
                                                             partition_max_bytes=partition_max)
                                     for _ in range(partitions))),))


def repeated_partitions(bootstrap: str) -> dict[str, object]:
    raw = RawKafka(bootstrap)
    frame = encode_request(1, 4, 1, "attacker", _fetch_v4("filled", 200, 64 * 1024, MB))
    answered = []
    for _ in range(5):
        raw.send_raw(frame)
        answer = raw.receive_frame()
        answered.append(0 if answer is None else len(answer))
    raw.close()
    return {"answer_bytes": answered}


def unread_fetches(bootstrap: str) -> dict[str, object]:
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sent = 0
    try:
        for correlation in range(300):
            sock.sendall(encode_request(1, 4, correlation, "attacker", _fetch_v4("filled", 1, MB, MB)))
            sent += 1
    except TimeoutError:
        pass  # the broker stopped reading
    time.sleep(3)  # what the broker does with what it read, while the probe runs
    sock.close()
    return {"fetches_sent": sent}


def _connections(port: int, count: int) -> list[socket.socket]:
    opened = []
    for _ in range(count):
        try:
            opened.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    return opened


def _still_open(sockets: list[socket.socket]) -> int:
    alive = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            alive += sock.recv(1) != b""
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


def pre_auth_frames(port: int) -> dict[str, object]:
    sockets = _connections(port, 40)
    chunk = b"\0" * 65536
    sent = 0
    for sock in sockets:
        try:
            sock.sendall(struct.pack(">i", FRAME_LIMIT))  # the most the listener takes (maxMessageSize + 64 KiB)
            for _ in range(5_300_000 // len(chunk)):
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            continue
    time.sleep(2)
    open_ = _still_open(sockets)
    for sock in sockets:
        sock.close()
    return {"bytes_sent": sent, "connections_open_after": open_}


def idle_pre_auth(port: int) -> dict[str, object]:
    sockets = _connections(port, 2000)
    time.sleep(5)
    open_ = _still_open(sockets)
    for sock in sockets:
        sock.close()
    return {"connected": len(sockets), "open_after_5s": open_}


def pre_auth_flood(port: int) -> dict[str, object]:
    one = encode_request(18, 3, 1, "attacker", api_versions.ApiVersionsRequest(client_software_name="a",
                                                                              client_software_version="1"))
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sent = 0
    try:
        for _ in range(150):
            sock.sendall(one * 1000)
            sent += 1000
    except (TimeoutError, OSError):
        pass
    time.sleep(2)
    sock.close()
    return {"requests_sent": sent}


def _broker(directory: Path, sasl: bool) -> tuple[Standalone, dict[str, str]]:
    if not sasl:
        broker = Standalone(directory / "data", [], args=["--kafka", "0"]).start()
        return broker, {}
    key = secrets.token_bytes(32)
    (directory / "secret.key").write_bytes(key)
    broker = Standalone(directory / "data", [
        "authenticationEnabled=true", "authenticationProviders=token", "authorizationEnabled=true",
        "superUserRoles=admin", f"tokenSecretKey=file://{directory / 'secret.key'}", "messagingProtocols=kafka",
        "kafkaListeners=SASL_PLAINTEXT://127.0.0.1:0", *LIMITS]).start()
    return broker, {"Authorization": f"Bearer {jwt.encode({'sub': 'admin'}, key, algorithm='HS256')}"}


ATTACKS: dict[str, tuple[bool, Callable[[Standalone], dict[str, object]]]] = {
    "repeated-partitions": (False, lambda b: repeated_partitions(f"127.0.0.1:{_kafka_port(b, 'PLAINTEXT')}")),
    "unread-fetches": (False, lambda b: unread_fetches(f"127.0.0.1:{_kafka_port(b, 'PLAINTEXT')}")),
    "pre-auth-frames": (True, lambda b: pre_auth_frames(_kafka_port(b, "SASL_PLAINTEXT"))),
    "idle-pre-auth": (True, lambda b: idle_pre_auth(_kafka_port(b, "SASL_PLAINTEXT"))),
    "pre-auth-flood": (True, lambda b: pre_auth_flood(_kafka_port(b, "SASL_PLAINTEXT"))),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(ATTACKS), help="these attacks only")
    args = parser.parse_args()
    results: dict[str, object] = {"load_average": os.getloadavg()[0]}
    for name in args.only or list(ATTACKS):
        sasl, attack = ATTACKS[name]
        with tempfile.TemporaryDirectory() as directory:
            broker, headers = _broker(Path(directory), sasl)
            try:
                if not sasl:
                    _fill(f"127.0.0.1:{_kafka_port(broker, 'PLAINTEXT')}", "filled", 4)
                before = rss_kb(broker.proc.pid)
                with AdminProbe(broker, headers) as probe:
                    outcome = attack(broker)
                results[name] = {"rss_before_mb": round(before / 1024, 1),
                                 "rss_peak_mb": round(probe.peak_kb / 1024, 1), **probe.figures(), **outcome}
            finally:
                broker.stop()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
