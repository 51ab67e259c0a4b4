"""The admin HTTP server against a client that does not read its answers (issue 40, item 9):
once the answers it leaves unread stop the server's answering, requests it pipelines behind
wait with their heads only; the 64 MiB function uploads of an unauthenticated client are not
read into memory, and what waited is dropped unanswered when the client leaves.

The stall is made as an attacker makes it: peeks at a 3 MB message, pipelined on a socket
whose receive buffer is 4 KB and never read, fill the server's socket and transport buffers."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from admin_http import http
from procfs import established, rss_kb
from security_helpers import client_as, scene_broker
from standalone import Standalone

UPLOAD = 64 * 1024 * 1024
PEEK = "/admin/v2/persistent/t1/ns/big/examinemessage?initialPosition=earliest"


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    with scene_broker(tmp_path_factory.mktemp("http") / "data", signer) as broker:
        client = client_as(broker.url, signer, "app")
        try:
            client.create_producer("persistent://t1/ns/big", batching_enabled=False).send(b"m" * (3 * 1024 * 1024))
        finally:
            client.close()
        yield broker


class Attacker:
    """A socket that never reads, with a 4 KB receive buffer; `send` writes until the server
    stops reading (a write blocked for a second) and says how much went out."""

    def __init__(self, broker: Standalone) -> None:
        parts = urlsplit(broker.admin_url)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((parts.hostname, parts.port))
        self.sock.settimeout(1)

    def send(self, *parts: bytes | int) -> int:
        """Each bytes part as is, each int part as that many bytes of body."""
        sent = 0
        try:
            for part in parts:
                data = part if isinstance(part, bytes) else b"x" * (1024 * 1024)
                for _ in range(1 if isinstance(part, bytes) else part // len(data)):
                    self.sock.sendall(data)
                    sent += len(data)
        except TimeoutError:
            pass
        return sent

    def close(self) -> None:
        self.sock.close()


def stall(signer) -> bytes:
    """Three authenticated peeks whose answers (3 MB each) outgrow what a socket holds."""
    return (f"GET {PEEK} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {signer.token('app')}\r\n\r\n" * 3).encode()


def upload_head(n: int) -> bytes:
    return (f"POST /admin/v3/functions/t1/ns/f{n} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {UPLOAD}\r\n\r\n").encode()


def test_uploads_behind_unread_answers_are_not_read_into_memory(broker, signer):
    """On a stalled connection, four unauthenticated 64 MiB uploads: the broker reads no
    more than a window of the first (the client's writes block), and its memory stays flat;
    they once were all read (46 -> 302 MB, and the memory stayed)."""
    before = rss_kb(broker.proc.pid)
    attacker = Attacker(broker)
    try:
        parts: list[bytes | int] = [stall(signer)]
        for n in range(4):
            parts += [upload_head(n), UPLOAD]
        sent = attacker.send(*parts)
        grown_mb = (rss_kb(broker.proc.pid) - before) / 1024
        assert sent < UPLOAD, f"the broker read {sent / 2**20:.0f} MiB of uploads nobody authorized"
        assert grown_mb < 40, f"broker RSS +{grown_mb:.0f} MB"
    finally:
        attacker.close()
    status, _, _ = http("GET", f"{broker.admin_url}/admin/v2/clusters", headers=signer.bearer("app"))
    assert status == 200
    assert (rss_kb(broker.proc.pid) - before) / 1024 < 40


def test_what_waited_behind_a_client_that_left_is_not_done(broker, signer):
    """Requests pipelined behind unread answers: when the client leaves, those not begun are
    dropped (their effects too), not answered into a closed socket."""
    admin = signer.token("admin")
    body = json.dumps({"allowedClusters": ["standalone"]})
    creations = b"".join(
        (f"PUT /admin/v2/tenants/left{n} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin}\r\n"
         f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode() for n in range(3))
    attacker = Attacker(broker)
    try:
        attacker.send(stall(signer) + creations)
    finally:
        attacker.close()
    deadline = time.monotonic() + 10
    port = urlsplit(broker.admin_url).port
    while established(broker.proc.pid, port) and time.monotonic() < deadline:  # until the broker saw it leave
        time.sleep(0.05)
    # what is tested is that nothing happens: a broker that went on answering did so within
    # milliseconds of the client's leaving, so a second of nothing is the proof
    window_end = time.monotonic() + 1
    while time.monotonic() < window_end:
        assert "PUT /admin/v2/tenants/left" not in broker.log()
        time.sleep(0.05)
    status, _, content = http("GET", f"{broker.admin_url}/admin/v2/tenants", headers=signer.bearer("admin"))
    assert status == 200
    assert not [tenant for tenant in json.loads(content) if tenant.startswith("left")]


def test_an_authorized_body_held_back_is_read_in_full_when_its_turn_comes(broker, signer):
    """The window holds a body back only until its handler asks: a tenant admin's second
    schema upload (300 KB) waits, pipelined, while the first is checked, its body held after
    64 KiB; then it is read to its end and registered."""
    token = signer.token("t1-admin")
    requests = b""
    for optional in (0, 1):
        fields = [{"name": f"field_number_{i}", "type": "long"} for i in range(8000)]
        fields += [{"name": "extra", "type": ["null", "long"], "default": None}] * optional
        body = json.dumps({"type": "AVRO", "schema": json.dumps({"type": "record", "name": "R", "fields": fields})})
        requests += (f"POST /admin/v2/schemas/t1/ns/held/schema HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     f"{token}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()
    parts = urlsplit(broker.admin_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        writer = threading.Thread(target=sock.sendall, args=(requests,))
        writer.start()
        answers = b""
        while answers.count(b'{"version": {"version": ') < 2:
            chunk = sock.recv(65536)
            assert chunk, answers
            answers += chunk
        writer.join()
    assert answers.count(b"HTTP/1.1 200 ") == 2
    assert b'{"version": {"version": 0}}' in answers and b'{"version": {"version": 1}}' in answers
