"""The HTTP/1.1 server of the admin API and the functions worker: llhttp (through
httptools) reads requests, asyncio carries the bytes, and each connection answers its
requests in order.

Why not a web framework: aiohttp, which served here before, costs a third of a
standalone's start-up (its import builds two TLS client contexts from the system's CA
bundle, for a client the broker never uses) and 9 MB of its idle memory. The APIs served
here need a router, a body with a limit, keep-alive and TLS; llhttp does the parsing, with
its strict checks against request smuggling (Content-Length with Transfer-Encoding,
bad chunk sizes, bare CR/LF).

Limits against misbehaving clients, each per connection unless said:
- a request's target and header lines within 64 KiB, received within the request time budget
  of their first byte, or of the connection's opening for its first request (else 431 or 408,
  and the connection closes); an idle keep-alive connection closes after 75 s;
- a body within its route's limit (413), read only as its handler asks for it, after
  authentication and authorization (64 KiB ahead of that at most: messages.Body);
- at most 8 pipelined requests parsed ahead of the one being answered (what was read past
  them waits unparsed, and reading stops), and those of a client that left dropped unanswered;
- an answer taken by the client within the request time budget once the socket's buffers are
  full (a client that reads a byte a second is cut off, not served for days);
- at most `max_connections` at once (maxHttpServerConnections), over all: past it, a new one
  is closed at once.
"""

from __future__ import annotations

import asyncio
import http
import logging
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Sequence
from typing import cast

import httptools

from magnetar.web.connection_state import ConnectionState, Deadline, Event, Pause
from magnetar.web.messages import Body, Handler, Headers, HttpError, Middleware, Request, Response, Target, fail
from magnetar.web.routing import MAX_BODY_BYTES, Router

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 64 * 1024
KEEPALIVE_SECONDS = 75.0
MAX_PIPELINED = 8
PARSE_SLICE = 1024
"""Bytes parsed at a time outside a body of declared length: parsing stops this close past
MAX_PIPELINED requests (the parser itself cannot be stopped mid-buffer)."""
CHUNKED_SLICE = 16 * 1024
SHUTDOWN_GRACE_SECONDS = 10.0
LINGER_SECONDS = 2.0
_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_FORBIDDEN_IN_HEADERS = str.maketrans("", "", "\r\n\0")


class WebServer:
    """A router behind middlewares (outermost first), on as many listening sockets as asked."""

    def __init__(self, router: Router, middlewares: Sequence[Middleware], head_seconds: float,
                 max_connections: int = 0) -> None:
        """`head_seconds`: the request time budget; `max_connections`: 0 for no limit."""
        self.router = router
        self.head_seconds = head_seconds
        self.max_connections = max_connections
        self.refusing = False
        handler: Handler = self._dispatch
        for middleware in reversed(middlewares):
            handler = _wrapped(middleware, handler)
        self._handler = handler
        self._servers: list[asyncio.Server] = []
        self.connections: set[_Connection] = set()

    async def listen(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> int:
        """Listens on (host, port), the port chosen by the system when 0; returns the port."""
        server = await asyncio.get_running_loop().create_server(
            self.new_connection, host, port, ssl=ssl_context, reuse_address=True)
        self._servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    def new_connection(self) -> _Connection:
        """The protocol of one accepted socket."""
        return _Connection(self)

    async def close(self) -> None:
        """Stops listening, lets requests being answered finish (up to a grace period), then
        closes every connection."""
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            connection.close_when_idle()
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # a poll with a deadline: connections end on their own
        for connection in list(self.connections):
            connection.abort()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    async def respond(self, request: Request) -> Response:
        """The response to a request, whatever its handler did."""
        try:
            return await self._handler(request)
        except HttpError as error:
            return error.response
        except Exception:
            log.exception("admin request %s %s failed", request.method, request.path)
            return fail(500, "internal broker error").response

    async def _dispatch(self, request: Request) -> Response:
        if request.route is None:
            await self.router.refusal(request.method, request.raw_path)
        assert request.route is not None
        return await request.route.handler(request)


def _wrapped(middleware: Middleware, inner: Handler) -> Handler:
    async def handle(request: Request) -> Response:
        return await middleware(request, inner)

    return handle


class _Incoming:
    """A request while it is being read: its line and headers, then its body."""

    __slots__ = ("body", "complete", "headers", "size", "target")

    def __init__(self) -> None:
        self.target = bytearray()
        self.headers: list[tuple[bytes, bytes]] = []
        self.size = 0
        self.body: Body | None = None
        self.complete = False


class _Exchange:
    """A request read and waiting for (or being given) its answer."""

    __slots__ = ("incoming", "keep_alive", "request")

    def __init__(self, request: Request, incoming: _Incoming, keep_alive: bool) -> None:
        self.request, self.incoming, self.keep_alive = request, incoming, keep_alive


class _Connection(asyncio.Protocol):
    """One client's connection: httptools' callbacks (on_*) build requests, `_serve` answers
    them one after the other. Where it is (reading requests or not, closing, paused and why,
    which deadline runs) is `state`'s (connection_state.py); what is here carries it out."""

    def __init__(self, server: WebServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.state = ConnectionState()
        self.incoming: _Incoming | None = None
        self.queue: deque[_Exchange] = deque()
        self.serving: asyncio.Task[None] | None = None
        """The task answering the queue's requests, while there are any."""
        self.timer: asyncio.TimerHandle | None = None
        """The deadline the state runs, if any."""
        self.drained = asyncio.Event()
        """Clear while the client does not read what was written: no more is answered (and so,
        past MAX_PIPELINED, no more is read) until it does."""
        self.drained.set()
        self.stalled: asyncio.TimerHandle | None = None
        """While `drained` is clear: the end of the time the client has to take the answers."""
        self.unparsed: memoryview | None = None
        """What was read and not yet parsed (past MAX_PIPELINED waiting requests)."""

    # -- the transport's side
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's is not an asyncio.Transport subclass
        server = self.server
        if server.max_connections and len(server.connections) >= server.max_connections:
            if not server.refusing:
                log.warning("admin API connections refused: %d are open (maxHttpServerConnections)",
                            len(server.connections))
                server.refusing = True
            self.state.on(Event.TURNED_AWAY)
            transport.abort()
            return
        server.refusing = False
        self.transport = transport
        server.connections.add(self)
        self._arm(Deadline.HEAD)

    def connection_lost(self, exc: Exception | None) -> None:
        """Requests not being answered yet are dropped, with every body read."""
        self.server.connections.discard(self)
        self._disarm()
        self.state.on(Event.LOST)
        self.drained.set()
        self.unparsed = None
        if self.stalled is not None:
            self.stalled.cancel()
        for body in (self.incoming.body if self.incoming else None, *(e.incoming.body for e in self.queue)):
            if body is not None:
                body.abort()
        while len(self.queue) > (self.serving is not None):
            self.queue.pop()

    def pause_writing(self) -> None:
        self.drained.clear()
        self.stalled = asyncio.get_running_loop().call_later(self.server.head_seconds, self._not_taken)

    def resume_writing(self) -> None:
        self.drained.set()
        if self.stalled is not None:
            self.stalled.cancel()
            self.stalled = None

    def _not_taken(self) -> None:
        """The client left its answers unread for the whole budget: the connection is reset,
        and what it did not take dropped, the kernel's copy too (a close would wait for it
        to be sent, and the kernel go on sending what it holds)."""
        log.debug("admin connection reset: its answers were not read within %s s", self.server.head_seconds)
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if not self.state.reads_requests:
            return
        self.unparsed = memoryview(data if self.unparsed is None else bytes(self.unparsed) + data)
        self._parse()

    def _parse(self) -> None:
        """Parses what was read a slice at a time, until more than MAX_PIPELINED requests
        wait: the rest then waits, with reading paused, until they are answered."""
        while self.unparsed is not None and self.state.reads_requests:
            if len(self.queue) > MAX_PIPELINED:
                self._pause(Pause.PIPELINE)
                return
            size = self._slice()
            piece, rest = self.unparsed[:size], self.unparsed[size:]
            self.unparsed = rest if len(rest) else None
            self._feed(piece)
        self.unparsed = None
        self._resume(Pause.PIPELINE)

    def _slice(self) -> int:
        """A body of declared length is parsed whole (as far as it was read)."""
        incoming = self.incoming
        body = incoming.body if incoming is not None else None
        if body is None:
            return PARSE_SLICE
        return max(body.declared - body.received, 1) if body.declared is not None else CHUNKED_SLICE

    def _feed(self, data: memoryview) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # answered in HTTP/1.1 as if it had asked nothing
            self.state.on(Event.UPGRADE)
        except httptools.HttpParserCallbackError as error:
            self._refuse(error.__context__ if isinstance(error.__context__, HttpError) else
                         fail(400, f"malformed request: {error.__context__ or error}"))
        except httptools.HttpParserError as error:
            self._refuse(fail(400, f"malformed request: {error}"))

    def close_when_idle(self) -> None:
        self.state.on(Event.SHUTDOWN)
        if self.serving is None:
            self.abort()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # -- httptools' callbacks
    def on_message_begin(self) -> None:
        self.incoming = _Incoming()
        self._arm(Deadline.HEAD)

    def on_url(self, url: bytes) -> None:
        assert self.incoming is not None
        self._count(len(url))
        self.incoming.target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.incoming is not None
        self._count(len(name) + len(value) + 4)
        self.incoming.headers.append((name, value))

    def on_headers_complete(self) -> None:
        assert self.incoming is not None and self.transport is not None
        self._disarm()
        incoming, method = self.incoming, self.parser.get_method().decode("ascii")
        headers, target = Headers(incoming.headers), Target(bytes(incoming.target))
        route = self.server.router.resolve(method, target.raw_path)
        declared = headers.get("Content-Length", "")
        incoming.body = Body(route[0].max_body if route is not None else MAX_BODY_BYTES,
                             int(declared) if declared.isdigit() else None, self._hold_body)
        request = Request(method, target, headers, self.transport, route, incoming.body,
                          self._continue if headers.get("Expect", "").lower() == "100-continue" else None)
        self.queue.append(_Exchange(request, incoming, self.parser.should_keep_alive()))
        if self.serving is None:
            self.serving = asyncio.ensure_future(self._serve())

    def on_body(self, chunk: bytes) -> None:
        assert self.incoming is not None and self.incoming.body is not None
        self.incoming.body.receive(chunk)

    def on_message_complete(self) -> None:
        assert self.incoming is not None and self.incoming.body is not None
        self.incoming.complete = True
        self.incoming.body.end()
        self.incoming = None

    # -- answering
    async def _serve(self) -> None:
        try:
            while self.queue:
                exchange = self.queue[0]
                response = await self.server.respond(exchange.request)
                await self.drained.wait()
                self.queue.popleft()
                if not exchange.keep_alive or not exchange.incoming.complete:
                    await self._send(exchange.request.method, response, close=True)
                    self._close()
                    return
                await self._send(exchange.request.method, response, close=self.state.closes_with(bool(self.queue)))
                if len(self.queue) <= MAX_PIPELINED:
                    self._parse()
            if not self.state.reads_requests:
                self._finish()
        finally:
            self.serving = None
        if self.incoming is None and self.transport is not None and not self.transport.is_closing():
            self._arm(Deadline.KEEP_ALIVE)

    async def _send(self, method: str, response: Response, *, close: bool) -> None:
        """A response of several parts goes a part at a time as the client takes them: a
        large body is neither copied whole into the transport's buffer nor held there."""
        for part in self._write(method, response, close=close):
            await self.drained.wait()
            if self.transport is None or self.transport.is_closing():
                return
            self.transport.write(part)

    def _write(self, method: str, response: Response, *, close: bool) -> list[bytes]:
        """Writes the head and the body's first part; what remains of the body to send."""
        if self.transport is None or self.transport.is_closing():
            return []  # the client left; what its request changed stays done
        try:
            head = _head(response, close=close)
        except ValueError as error:
            log.error("admin response to %s not sent: %s", method, error)
            response = fail(500, "the response could not be written").response
            head = _head(response, close=close)
        if method == "HEAD" or response.status == 204:
            self.transport.write(head)
            return []
        first, *rest = response.parts or (b"",)
        self.transport.write(head + first)
        return rest

    def _continue(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _refuse(self, error: HttpError) -> None:
        """Answers a request that could not be read, after those before it, and closes
        (logged at DEBUG only: a scanner's garbage would flood INFO)."""
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        log.debug("admin connection from %s refused: %s", peer, error)
        self.state.on(Event.REFUSED, error)
        self._disarm()
        if self.incoming is not None and self.incoming.body is not None:  # its handler awaits the rest
            self.incoming.body.abort()
        if self.serving is None:
            self._finish()
        else:
            self._pause(Pause.REFUSED)

    def _finish(self) -> None:
        if self.state.refusal is not None:
            self._write("", self.state.refusal.response, close=True)
        self._close()

    def _close(self) -> None:
        """Closes after the last response: the sending side at once, the receiving side when
        the client stops sending or after LINGER_SECONDS (what it sends meanwhile is read and
        dropped). Closing both while a body the server did not read still arrives would reset
        the connection, and the client could lose the answer."""
        self.state.on(Event.CLOSE)
        if self.incoming is not None and self.incoming.body is not None:
            self.incoming.body.abort()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        if self.state.resume_all():
            transport.resume_reading()
        self._arm(Deadline.LINGER)

    def _hold_body(self, held: bool) -> None:
        if held:
            self._pause(Pause.BODY)
        else:
            self._resume(Pause.BODY)

    def _pause(self, reason: Pause) -> None:
        if self.state.pause(reason) and self.transport is not None:
            self.transport.pause_reading()

    def _resume(self, reason: Pause) -> None:
        if self.state.resume(reason) and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _head_too_slow(self) -> None:
        self._refuse(fail(408, f"request headers not received within {self.server.head_seconds} s"))

    def _count(self, size: int) -> None:
        assert self.incoming is not None
        self.incoming.size += size
        if self.incoming.size > MAX_HEAD_BYTES:
            raise fail(431, f"the request line and headers are over {MAX_HEAD_BYTES} bytes")

    def _arm(self, deadline: Deadline) -> None:
        """Runs `deadline` in place of the one running, if the state's phase has it (so a
        connection closing keeps its linger, not the keep-alive of one that goes on)."""
        if not self.state.runs(deadline):
            return
        self._disarm()
        seconds, action = {Deadline.HEAD: (self.server.head_seconds, self._head_too_slow),
                           Deadline.KEEP_ALIVE: (KEEPALIVE_SECONDS, self.abort),
                           Deadline.LINGER: (LINGER_SECONDS, self.abort)}[deadline]
        self.timer = asyncio.get_running_loop().call_later(seconds, action)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def _head(response: Response, *, close: bool) -> bytes:
    """The status line and headers; ValueError when a header would break the framing."""
    try:
        phrase = http.HTTPStatus(response.status).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {response.status} {phrase}", f"Date: {_http_date(time.time())}"]
    for name, value in response.headers.items():
        if name.translate(_FORBIDDEN_IN_HEADERS) != name or value.translate(_FORBIDDEN_IN_HEADERS) != value:
            raise ValueError(f"header {name[:80]!r} holds a line break or NUL")
        lines.append(f"{name}: {value}")
    if response.status != 204:
        lines.append(f"Content-Length: {sum(map(len, response.parts))}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _http_date(now: float) -> str:
    """The Date header's form (RFC 9110 IMF-fixdate) in English whatever the locale. What
    email.utils.formatdate(usegmt=True) gives, without its imports (~5 ms of start-up)."""
    t = time.gmtime(now)
    return (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon - 1]} {t.tm_year} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")
