"""Admin requests are bounded in size and time."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

from admin_http import http

BASE = "/admin/v2/persistent/public/default"


def test_ten_megabyte_body_is_413(broker):
    status, _, _ = http("PUT", f"{broker.admin_url}{BASE}/big/partitions", b"1" * (10 * 1024 * 1024))
    assert status == 413


def test_a_trickled_body_is_cut_off(broker_factory):
    """A body that never finishes arriving frees its handler within the time budget."""
    budget = 2
    broker = broker_factory(f"webServiceRequestTimeoutSeconds={budget}")
    parts = urlsplit(broker.admin_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=budget + 30) as sock:
        sock.sendall(f"PUT {BASE}/slow/partitions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                     f"Content-Type: application/json\r\n\r\n1".encode())
        started = time.monotonic()
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert time.monotonic() - started < budget + 10
