"""How deep the HTTP server parses a client's pipelined requests, driven in-process through
a transport that records what the server does with the socket: 14,000 requests in one read
(what a 256 KB read holds of the shortest) wait unparsed, not as 14,000 request objects
(the attack of issue 40's probe: 20 such connections grew the broker 34 -> 130 MB), and
every one of them is answered, in order, once the client takes its answers."""

from __future__ import annotations

import asyncio

import httptools

from magnetar import web
from magnetar.web.server import MAX_PIPELINED, PARSE_SLICE, WebServer

REQUEST = b"GET /q HTTP/1.1\r\nHost: x\r\n\r\n"


class Transport(asyncio.Transport):
    """A socket's end as the server sees it: what it writes, and whether it reads."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.reading = True
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1) if name == "peername" else default


class Answers:
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.bodies: list[bytes] = []
        self._body = b""

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.bodies.append(self._body)
        self._body = b""


async def _pipelined(count: int) -> None:
    answered = 0
    release = asyncio.Event()

    async def numbered(_request: web.Request) -> web.Response:
        nonlocal answered
        await release.wait()
        answered += 1
        return web.Response(text=str(answered))

    router = web.Router()
    router.add_routes([web.get("/q", numbered)])
    server = WebServer(router, [], head_seconds=30)
    transport = Transport()
    connection = server.new_connection()
    connection.connection_made(transport)
    connection.data_received(REQUEST * count)
    await asyncio.sleep(0)
    waiting = len(connection.queue)
    assert MAX_PIPELINED < waiting <= MAX_PIPELINED + 1 + PARSE_SLICE // len(REQUEST), waiting
    assert not transport.reading
    assert len(connection.unparsed) > (count - waiting - 1) * len(REQUEST) - PARSE_SLICE
    release.set()
    for _ in range(50 * count):  # loop turns, not time: each request takes a few
        if answered == count:
            break
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    answers = Answers()
    answers.parser.feed_data(bytes(transport.written))
    assert answers.bodies == [str(n).encode() for n in range(1, count + 1)]
    assert transport.reading and connection.unparsed is None
    connection.connection_lost(None)


def test_pipelined_requests_wait_unparsed_and_are_all_answered_in_order() -> None:
    asyncio.run(_pipelined(14_000))
