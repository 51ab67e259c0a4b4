"""One TCP connection to a broker, shared by every producer and consumer that lives there.

An asyncio BufferedProtocol (not streams: each read goes straight to the sans-IO
`FrameDecoder`, with no coroutine switch per frame). The socket is read into one buffer
kept for the connection's life: asyncio's `data_received` path allocates a fresh 256 KiB
bytes object per read (an mmap and munmap each when malloc's threshold is low), and at a
steady rate a client reads about once a message. It owns what is per connection in
Pulsar: the CONNECT handshake, request ids and the futures waiting on them, keep-alive,
and the routing of pushed frames (MESSAGE, SEND_RECEIPT, CLOSE_*) to the producer or
consumer registered under the id the frame names. When it is lost, every waiting request
fails and every registered handler is told, so each can reconnect on its own schedule.
TLS and credentials come from a ClientSecurity given to `open`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any, Protocol, cast

from magnetar import __version__
from magnetar.client import errors
from magnetar.credentials.security import ClientSecurity
from magnetar.wire import client_commands as cc
from magnetar.wire.errors import WireError
from magnetar.wire.frames import DEFAULT_MAX_MESSAGE_SIZE, FRAME_PADDING, Frame, FrameDecoder, command_body
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
log = logging.getLogger(__name__)

CLIENT_VERSION = f"magnetar-client-{__version__}"
#: The most bytes of one turn's frames joined into one buffer for one write.
_JOIN_LIMIT = 256 * 1024
#: The connection's read buffer: as much as asyncio's own reads take at once.
_READ_SIZE = 256 * 1024
#: Held frames leave at once when they reach this many bytes, before the turn ends: a
#: coroutine producing in a loop without awaiting would otherwise hold every batch it cut
#: until it yields, and the broker would get them in bursts (plain batched produce lost 7 %).
_SEND_AT = 64 * 1024


_bursts = threading.local()
"""Per loop thread: the connections written to in the burst `in_one_write` runs, or None."""


def in_one_write(work: Callable[[], None]) -> None:
    """Run `work` (the blocking facade's hand-over of queued sends) and send what it wrote to
    each connection when it returns, not at the end of the loop's turn: at a steady rate a
    hand-over is all a turn does, and waiting for the turn's end costs a turn more (a
    `call_soon`, then a poll of the sockets) a message. Frames a connection held before the
    burst began leave with the ones written in it, in order, at the turn's end."""
    if getattr(_bursts, "held", None) is not None:  # already in one
        work()
        return
    held: list[Connection] = []
    _bursts.held = held
    try:
        work()
    finally:
        _bursts.held = None
        for conn in held:
            conn._uncork()


class ProducerHandler(Protocol):
    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def on_send_error(self, error: pb.CommandSendError) -> None: ...
    def on_broker_close(self, *, now: bool = False) -> None: ...
    def connection_closed(self, conn: Connection) -> None: ...


class ConsumerHandler(Protocol):
    def on_message(self, message: pb.CommandMessage, payload: bytes) -> None: ...
    def on_broker_close(self, *, now: bool = False) -> None: ...
    def on_active_change(self, active: bool) -> None: ...
    def connection_closed(self, conn: Connection) -> None: ...


class Connection(asyncio.BufferedProtocol):
    """A CONNECTed connection; `request` sends a command and awaits the frame answering it."""

    def __init__(self, logical_url: str, physical_url: str, operation_timeout: float,
                 keepalive_interval: float = 30.0, on_closed: Callable[[Connection], None] | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.security = security or ClientSecurity()
        self.logical_url = logical_url
        self.physical_url = physical_url
        self.operation_timeout = operation_timeout
        self.keepalive_interval = keepalive_interval
        self._on_closed = on_closed
        self._loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder(DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING)
        self._read_view = memoryview(bytearray(_READ_SIZE))
        """Where the transport reads to; the decoder copies what it keeps before the next read."""
        self._read_done: list[Callable[[], None]] = []
        self.dispatching = False
        """While the frames of a read are handed out (after_read waits for the end of it)."""
        self._transport: asyncio.Transport | None = None
        self._corked: list[bytes] | None = None
        self._corked_bytes = 0
        """Frames written in this turn of the loop, sent together at its end (see `write`)."""
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._next_request_id = 0
        self.producers: dict[int, ProducerHandler] = {}
        self.consumers: dict[int, ConsumerHandler] = {}
        self._connected: asyncio.Future[pb.CommandConnected] = self._loop.create_future()
        self._traffic = False
        self._keepalive: asyncio.TimerHandle | None = None
        self.closed = False
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self.protocol_version = 0

    # -- opening
    @classmethod
    async def open(cls, logical_url: str, physical_url: str, host: str, port: int, *, operation_timeout: float,
                   connection_timeout: float, keepalive_interval: float = 30.0,
                   on_closed: Callable[[Connection], None] | None = None, tls: bool = False,
                   security: ClientSecurity | None = None) -> Connection:
        """Connect (over TLS if `tls`) and handshake with the credentials of `security`;
        ConnectError when the broker cannot be reached or will not answer."""
        loop = asyncio.get_running_loop()
        conn = cls(logical_url, physical_url, operation_timeout, keepalive_interval, on_closed, security)
        try:
            async with asyncio.timeout(connection_timeout):
                ssl_context = conn.security.ssl_context() if tls else None
                await loop.create_connection(lambda: conn, host, port, ssl=ssl_context)
                conn.write(conn.security.connect_frame(CLIENT_VERSION))
                connected = await conn._connected
        except TimeoutError:
            conn.close()
            raise errors.ConnectError(f"connection to {physical_url} not established in {connection_timeout:g} s") \
                from None
        except OSError as exc:
            conn.close()
            raise errors.ConnectError(f"cannot connect to {physical_url}: {exc}") from exc
        conn.server_version = connected.server_version
        conn.protocol_version = connected.protocol_version
        if connected.HasField("max_message_size"):
            conn.max_message_size = connected.max_message_size
        conn._arm_keepalive()
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, but not always an asyncio.Transport subclass: uvloop's (the
        # facade's loop when installed) is not, and an isinstance check refused every connection.
        self._transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # -- reading
    def get_buffer(self, sizehint: int) -> memoryview:
        return self._read_view

    def buffer_updated(self, nbytes: int) -> None:
        self._traffic = True
        try:
            # The decoder copies commands, payloads and an unfinished frame's bytes out of
            # the view: nothing handed on aliases the buffer the next read overwrites.
            frames = self._decoder.feed(self._read_view[:nbytes])
        except WireError as exc:
            log.warning("%s sent a malformed frame, closing: %s", self.physical_url, exc)
            self.close()
            return
        self.dispatching = True
        for frame in frames:
            try:
                self._dispatch(frame)
            except Exception:
                log.exception("handling %s from %s", T.Type.Name(frame.command.type), self.physical_url)
        self.dispatching = False
        if self._read_done:
            hooks, self._read_done = self._read_done, []
            for hook in hooks:
                try:
                    hook()
                except Exception:
                    log.exception("after a read from %s", self.physical_url)

    def after_read(self, hook: Callable[[], None]) -> None:
        """Run `hook` once the frames of the read being dispatched are (a consumer hands the
        messages of one read to its application thread at once: one wake-up, not one each);
        at once when no read is being dispatched."""
        if self.dispatching:
            self._read_done.append(hook)
        else:
            hook()

    def _dispatch(self, frame: Frame) -> None:
        cmd = frame.command
        kind = cmd.type
        if kind == T.MESSAGE:
            body = cmd.message
            consumer = self.consumers.get(body.consumer_id)
            if consumer is not None:
                consumer.on_message(body, frame.payload or b"")
        elif kind == T.SEND_RECEIPT:
            producer = self.producers.get(cmd.send_receipt.producer_id)
            if producer is not None:
                producer.on_receipt(cmd.send_receipt)
        elif kind == T.PING:
            self.write(cc.pong())
        elif kind == T.PONG:
            pass
        elif kind == T.SEND_ERROR:
            producer = self.producers.get(cmd.send_error.producer_id)
            if producer is not None:
                producer.on_send_error(cmd.send_error)
        elif kind == T.CLOSE_PRODUCER:
            producer = self.producers.pop(cmd.close_producer.producer_id, None)
            if producer is not None:
                producer.on_broker_close(now=_names_a_broker(cmd.close_producer))
        elif kind == T.CLOSE_CONSUMER:
            consumer = self.consumers.pop(cmd.close_consumer.consumer_id, None)
            if consumer is not None:
                consumer.on_broker_close(now=_names_a_broker(cmd.close_consumer))
        elif kind == T.ACTIVE_CONSUMER_CHANGE:
            consumer = self.consumers.get(cmd.active_consumer_change.consumer_id)
            if consumer is not None:
                consumer.on_active_change(cmd.active_consumer_change.is_active)
        elif kind == T.CONNECTED:
            if not self._connected.done():
                self._connected.set_result(cmd.connected)
        elif kind == T.AUTH_CHALLENGE:  # the broker wants fresh credentials before the old ones expire
            self.write(self.security.auth_response_frame(CLIENT_VERSION))
        elif kind == T.ERROR and not self._connected.done():
            self._connected.set_exception(errors.refusal_of(cmd) or errors.ConnectError("refused"))
        else:
            self._answer(cmd)

    def _answer(self, cmd: pb.BaseCommand) -> None:
        body = command_body(cmd)
        request_id = getattr(body, "request_id", None)
        waiter = self._requests.get(request_id) if request_id is not None else None
        if waiter is None:
            log.debug("%s: unexpected %s", self.physical_url, T.Type.Name(cmd.type))
            return
        if cmd.type == T.PRODUCER_SUCCESS and not cmd.producer_success.producer_ready:
            return  # queued for exclusive access: the real answer follows with the same id
        del self._requests[request_id]
        if waiter.done():
            return
        refusal = errors.refusal_of(cmd)
        if refusal is not None:
            waiter.set_exception(refusal)
        else:
            waiter.set_result(cmd)

    # -- writing
    def write(self, data: bytes) -> None:
        """Frames written in one turn of the loop leave in one send at its end: the
        producers, consumers and transactions sharing the connection (a flush's batches, a
        commit's END_TXN, a NEW_TXN) cost one system call a turn, not one a frame; frames
        adding up to _SEND_AT leave at once; those written in `in_one_write` when it returns."""
        if self._transport is None or self.closed:
            return
        if self._corked is None:
            self._corked = [data]
            self._corked_bytes = len(data)
            burst = getattr(_bursts, "held", None)
            if burst is not None:
                burst.append(self)
            else:
                self._loop.call_soon(self._uncork)
        else:
            self._corked.append(data)
            self._corked_bytes += len(data)
        if self._corked_bytes >= _SEND_AT:
            self._uncork()

    def _uncork(self) -> None:
        frames, self._corked = self._corked, None
        if not frames or self._transport is None or self.closed:
            return
        transport = self._transport
        if len(frames) > 1 and sum(map(len, frames)) <= _JOIN_LIMIT:
            transport.writelines(frames)
            return
        for frame in frames:  # large frames (a chunked message's): not copied into one buffer first
            transport.write(frame)

    def new_request_id(self) -> int:
        self._next_request_id += 1
        return self._next_request_id

    async def request(self, build: Callable[[int], bytes], timeout: float | None = None) -> pb.BaseCommand:
        """Send the command `build(request_id)` returns and await its answer (errors raise)."""
        if self.closed:
            raise errors.NotConnected(f"connection to {self.physical_url} is closed")
        request_id = self.new_request_id()
        waiter = self._loop.create_future()
        self._requests[request_id] = waiter
        self.write(build(request_id))
        try:
            async with asyncio.timeout(self.operation_timeout if timeout is None else timeout):
                return await waiter
        except TimeoutError:
            raise errors.Timeout(f"no answer from {self.physical_url} within the operation timeout") from None
        finally:
            self._requests.pop(request_id, None)

    # -- keep-alive
    def _arm_keepalive(self) -> None:
        if self.keepalive_interval > 0 and not self.closed:
            self._keepalive = self._loop.call_later(self.keepalive_interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        if not self._traffic:
            log.warning("%s: no traffic within a keep-alive interval, closing", self.physical_url)
            self.close()
            return
        self._traffic = False
        self.write(cc.ping())
        self._arm_keepalive()

    # -- closing
    def close(self) -> None:
        if self._transport is not None:
            self._uncork()  # what was written before the close still leaves
            self._transport.close()
        else:
            self.connection_lost(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        if not self._connected.done():
            self._connected.set_exception(errors.ConnectError(f"{self.physical_url} closed the connection"))
            self._connected.exception()  # retrieved: nobody else may be waiting
        for waiter in self._requests.values():
            if not waiter.done():
                waiter.set_exception(errors.NotConnected(f"connection to {self.physical_url} lost"))
        self._requests.clear()
        handlers: list[Any] = [*self.producers.values(), *self.consumers.values()]
        self.producers.clear()
        self.consumers.clear()
        if self._on_closed is not None:
            self._on_closed(self)
        for handler in handlers:
            try:
                handler.connection_closed(self)
            except Exception:
                log.exception("connection_closed handler")


def _names_a_broker(close: pb.CommandCloseProducer | pb.CommandCloseConsumer) -> bool:
    """A CLOSE_* naming the broker now serving the topic (PIP-307's assigned URLs): the handler
    comes back at once, as the official client does, rather than after its backoff."""
    return close.HasField("assignedBrokerServiceUrl") or close.HasField("assignedBrokerServiceUrlTls")
