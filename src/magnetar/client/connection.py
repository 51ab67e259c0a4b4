"""A blocking connection to a Pulsar-compatible broker, for tools that read topics.

Spark tasks and the Spark driver are plain threads, not event loops, so this is a socket
with timeouts around `magnetar.wire`: requests wait for the frame answering their request
id, frames nobody asked for (MESSAGE, CLOSE_CONSUMER) queue up for whoever reads them,
and the broker's PINGs are answered while waiting. It speaks the protocol as the official
client does, so it works against Apache Pulsar as well as magnetar.
"""

from __future__ import annotations

import socket
import time
from collections import deque

from magnetar import __version__
from magnetar.client.errors import InvalidUrl, PulsarException, PulsarServerError, refusal_of
from magnetar.client.url import ServiceUrl
from magnetar.client.url import parse_service_url as parse_url
from magnetar.credentials.security import ClientSecurity
from magnetar.wire import client_commands
from magnetar.wire.errors import WireError
from magnetar.wire.frames import Frame, FrameDecoder, command_body, encode_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand

__all__ = ["ClientConnection", "PulsarClientError", "PulsarServerError", "parse_service_url"]

CLIENT_VERSION = f"magnetar-{__version__}"
DEFAULT_OPERATION_TIMEOUT = 30.0
"""As the official client's operationTimeoutSeconds."""

_READ_SIZE = 1 << 20


PulsarClientError = PulsarException
"""The broker could not be reached, answered garbage, or went away (every client error)."""

def parse_service_url(url: str) -> tuple[str, int]:
    """(host, port) of `pulsar://host[:port][,host2...]` or `pulsar+ssl://...`: the first host is used."""
    return _parse_url(url).first


def _parse_url(url: str) -> ServiceUrl:
    try:
        return parse_url(url)
    except InvalidUrl as exc:
        raise PulsarClientError(str(exc)) from None


def _consumer_of(frame: Frame) -> int | None:
    """The consumer a pushed frame (MESSAGE, CLOSE_CONSUMER, ...) is meant for."""
    return getattr(command_body(frame.command), "consumer_id", None)


class ClientConnection:
    """One TCP connection, CONNECTed, with request ids and a queue of pushed frames."""

    def __init__(self, url: str, timeout: float = DEFAULT_OPERATION_TIMEOUT,
                 security: ClientSecurity | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.security = security or ClientSecurity()
        self._decoder = FrameDecoder()
        self._decoded: deque[Frame] = deque()
        """Frames read off the socket, not yet looked at."""
        self._pushed: deque[Frame] = deque()
        """Frames looked at while waiting for an answer: pushed by the broker unasked."""
        self._next_request_id = 0
        self._next_consumer_id = 0
        parsed = _parse_url(url)
        self.tls = parsed.tls
        host, port = parsed.first
        # Before connecting: a trust file that cannot be read is the caller's settings, not the broker.
        context = self.security.ssl_context() if self.tls else None
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise PulsarClientError(f"cannot connect to {url}: {exc}") from exc
        try:
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is not None:
                self._sock = context.wrap_socket(self._sock, server_hostname=host)
        except OSError as exc:
            self._sock.close()
            raise PulsarClientError(f"cannot connect to {url}: {exc}") from exc
        try:
            self.server_version, self.protocol_version = self._handshake()
        except BaseException:
            self.close()
            raise

    def _handshake(self) -> tuple[str, int]:
        self._write(self.security.connect_frame(CLIENT_VERSION))
        frame = self._read_frame(time.monotonic() + self.timeout)
        refusal = refusal_of(frame.command)
        if refusal is not None:
            raise refusal
        if frame.command.type != T.CONNECTED:
            raise PulsarClientError(f"{self.url} answered CONNECT with {T.Type.Name(frame.command.type)}")
        connected = frame.command.connected
        return connected.server_version, connected.protocol_version

    def new_request_id(self) -> int:
        self._next_request_id += 1
        return self._next_request_id

    def new_consumer_id(self) -> int:
        self._next_consumer_id += 1
        return self._next_consumer_id

    def send(self, cmd: pb.BaseCommand) -> None:
        self._write(encode_command(cmd))

    def _write(self, frame: bytes) -> None:
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            raise PulsarClientError(f"connection to {self.url} lost: {exc}") from exc

    def request(self, cmd: pb.BaseCommand) -> pb.BaseCommand:
        """Send `cmd` (whose body carries a request_id) and return the frame answering it.

        A refusal (ERROR, or a response with its error field set) raises PulsarServerError.
        """
        request_id = command_body(cmd).request_id
        self.send(cmd)
        deadline = time.monotonic() + self.timeout
        while True:
            frame = self._read_frame(deadline)
            body = command_body(frame.command)
            if frame.command.type != T.MESSAGE and getattr(body, "request_id", None) == request_id:
                refusal = refusal_of(frame.command)
                if refusal is not None:
                    raise refusal
                return frame.command
            self._pushed.append(frame)

    def next_for(self, consumer_id: int) -> Frame:
        """The next frame the broker pushed to `consumer_id` (MESSAGE, CLOSE_CONSUMER, ...);
        frames for other consumers of this connection stay queued for them."""
        for i, frame in enumerate(self._pushed):
            if _consumer_of(frame) == consumer_id:
                del self._pushed[i]
                return frame
        deadline = time.monotonic() + self.timeout
        while True:
            frame = self._read_frame(deadline)
            if _consumer_of(frame) == consumer_id:
                return frame
            self._pushed.append(frame)

    def discard_pushed(self, consumer_id: int) -> None:
        """Forget queued frames for `consumer_id` (messages sent before a seek, say)."""
        self._pushed = deque(f for f in self._pushed if _consumer_of(f) != consumer_id)

    def _read_frame(self, deadline: float) -> Frame:
        """The next frame that is not a PING (PINGs are answered here)."""
        while True:
            frame = self._decoded.popleft() if self._decoded else None
            if frame is None:
                self._receive(deadline)
                continue
            if frame.command.type == T.PING:
                self._write(client_commands.pong())
                continue
            if frame.command.type == T.PONG:
                continue
            if frame.command.type == T.AUTH_CHALLENGE:  # fresh credentials before the old ones expire
                self._write(self.security.auth_response_frame(CLIENT_VERSION))
                continue
            return frame

    def _receive(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PulsarClientError(f"no answer from {self.url} within {self.timeout:g} s")
        self._sock.settimeout(remaining)
        try:
            data = self._sock.recv(_READ_SIZE)
        except TimeoutError as exc:
            raise PulsarClientError(f"no answer from {self.url} within {self.timeout:g} s") from exc
        except OSError as exc:
            raise PulsarClientError(f"connection to {self.url} lost: {exc}") from exc
        if not data:
            raise PulsarClientError(f"{self.url} closed the connection")
        try:
            self._decoded.extend(self._decoder.feed(data))
        except WireError as exc:
            raise PulsarClientError(f"{self.url} sent a malformed frame: {exc}") from exc

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> ClientConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
