"""/metrics of a broker with many topics: the page is made a slice at a time and sent in
parts, and it still arrives whole, every topic in every family, under one Content-Length."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from http.client import HTTPConnection

from magnetar.admin import server

TOPICS = 150  # about 35 lines a topic: several parts of METRICS_PART_LINES


def _request(connection: HTTPConnection, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    connection.request(method, path)
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def test_a_page_of_many_parts_arrives_whole(broker):
    url = urllib.parse.urlsplit(broker.admin_url)
    connection = HTTPConnection(url.hostname, url.port, timeout=60)
    names = [f"persistent://public/default/page-{n:03d}" for n in range(TOPICS)]
    for name in names:
        path = name.replace("persistent://", "/admin/v2/persistent/")
        assert _request(connection, "PUT", path)[0] == 204
        assert _request(connection, "PUT", f"{path}/subscription/sub")[0] == 204

    status, headers, body = _request(connection, "GET", "/metrics")
    assert status == 200
    assert int(headers["Content-Length"]) == len(body)
    text = body.decode()
    assert text.count("\n") > server.METRICS_PART_LINES  # so it went in several parts
    for family in ("pulsar_msg_backlog", "pulsar_subscription_back_log", "pulsar_storage_write_latency_count"):
        shown = set(re.findall(rf'^{family}{{[^}}]*topic="([^"]+)"', text, re.M))
        assert set(names) <= shown, family
    assert re.search(r"^magnetar_event_loop_lag_max_seconds\{.*\} \S+$", text, re.M)
    assert re.search(r"\n[a-z_]+\{[^}\n]*\} \S+\n\Z", text)  # the page's last sample arrived whole

    assert _request(connection, "HEAD", "/metrics")[0] in (200, 405)  # the connection is still in step
    assert _request(connection, "GET", "/admin/v2/brokers/ready")[0] == 200
    connection.close()


def test_making_the_page_hands_the_loop_back():
    """Lines that take long to make (here 0.1 ms of CPU each) do not hold the loop: other
    work runs between slices, long before the last line is made."""

    def slow_lines():
        for n in range(2000):
            until = time.perf_counter() + 0.0001
            while time.perf_counter() < until:
                pass
            yield f"line {n}"

    async def scenario() -> tuple[list[bytes], int]:
        turns = 0
        done = asyncio.Event()

        async def other_client() -> None:
            nonlocal turns
            while not done.is_set():
                turns += 1
                await asyncio.sleep(0)

        running = asyncio.create_task(other_client())
        await asyncio.sleep(0)
        parts = await server._in_slices(slow_lines())
        done.set()
        await running
        return parts, turns

    parts, turns = asyncio.run(scenario())
    assert b"".join(parts).decode().splitlines() == [f"line {n}" for n in range(2000)]
    assert turns >= 10  # 200 ms of work in slices of METRICS_SLICE_S (2 ms)
