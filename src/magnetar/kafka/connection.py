"""One Kafka client connection: frames in, requests handled in order, responses out in order.

As Kafka's brokers do, a connection handles one request at a time: the next is decoded only
once the previous one's response is written. One exception: Produce requests following one
another are taken while the earlier ones wait for their write (up to `PIPELINED_PRODUCES`
requests and `PIPELINED_PRODUCE_BYTES` in flight), so that a producer sending a request per
record (librdkafka's linger.ms=0) shares one fsync among them instead of paying one each;
Kafka's own brokers answer once the write is in the page cache, which costs no such wait.
The Produce requests at the head of the queue are taken together, as one group (the
produce API checks each partition once and stores it with one append for all of them).
Their answers still leave in request order, and any other request waits until every
produce before it is answered. Frames read ahead wait in a queue, and while any wait, or
while the transport's write buffer is full (asyncio's pause_writing: the client is not
reading its answers), the socket is not read, so a client that pipelines without reading
holds no more than one read's frames beyond those bounds. A turn of the event loop handles
at most `REQUESTS_PER_TURN` of them. A produce group with many records is converted over
several turns (ProduceApi.produce_group): meanwhile the connection takes nothing more, so
its requests are still checked and stored in the order they came.

On a SASL listener the connection holds a SaslSession: until it completes only ApiVersions
and the SASL requests are read, frames are capped at Kafka's `sasl.server.max.receive.size`
(512 KiB), and the role it names is what every request is authorized as (see access and
sasl). A connection idle for `connectionMaxIdleMs` (KoP's key for Kafka's
`connections.max.idle.ms`) is closed, and connections count against the broker's
`brokerMaxConnections` and `brokerMaxConnectionsPerIp`, as Pulsar clients' do. A request
that does not parse closes this connection (as a Kafka broker does) and nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from kio.schema.errors import ErrorCode

from magnetar.broker.topics.publish_rate import hold_for
from magnetar.kafka.access import Access
from magnetar.kafka.apis import NO_RESPONSE, KafkaApis
from magnetar.kafka.protocol.framing import FrameDecoder, FrameTooLarge
from magnetar.kafka.protocol.messages import (
    API_VERSIONS,
    MalformedRequest,
    Request,
    UnsupportedVersion,
    decode_request,
    encode_response,
)
from magnetar.kafka.sasl import SASL_APIS, SaslSession, sasl_response

log = logging.getLogger(__name__)
#: Kafka's `sasl.server.max.receive.size` default: the largest frame read before authentication.
PRE_AUTH_MAX_FRAME = 512 * 1024
#: Requests handled in one turn of the event loop before the rest wait for the next.
REQUESTS_PER_TURN = 64
#: Produce requests (and their bytes) taken while earlier ones wait for their write.
PIPELINED_PRODUCES = 128
PIPELINED_PRODUCE_BYTES = 1 << 20
_PRODUCE = 0
_API_KEY = struct.Struct(">h")


@dataclass(slots=True)
class _InFlight:
    """A request whose answer is not written yet: written when done and every one before it is."""

    request: Request
    answer: asyncio.Future[Any]
    size: int


class _Refused(Exception):
    """A request Kafka answers by closing the connection; the message says why."""


@dataclass(frozen=True, slots=True)
class Admission:
    """What a listener's connections share: the broker's connection count and the idle limit."""

    admit: Callable[[str], bool]
    """Counts a connection from an address in, or refuses it."""
    release: Callable[[str], None]
    max_idle_seconds: float


class KafkaConnection(asyncio.Protocol):
    def __init__(self, apis: KafkaApis, max_frame_size: int, *, sasl: bool, address: tuple[str, int],
                 admission: Admission) -> None:
        self._apis = apis
        self._max_frame = max_frame_size
        self._decoder = FrameDecoder(PRE_AUTH_MAX_FRAME if sasl else max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._frames: deque[bytes] = deque()
        self._in_flight: deque[_InFlight] = deque()
        self._in_flight_bytes = 0
        self._write_paused = False
        self._reading = True
        self._continuing = False  # a _drain is scheduled for the next turn
        self._converting: asyncio.Future[None] | None = None
        """While a produce group is converted over several turns: done once it is taken."""
        self._muted: asyncio.TimerHandle | None = None
        """While a throttled produce's wait runs (a topic's publish rate): the call that ends it."""
        self._peer = "?"
        self._ip: str | None = None
        self._uses_sasl = sasl
        self._sasl: SaslSession | None = None
        self._address = address
        self._admission = admission
        self._last_active = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._access: Access = apis.access(None, address)  # a SASL connection's, once it authenticates

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's is not an asyncio.Transport subclass
        peer = transport.get_extra_info("peername") or ("?", "?")
        self._peer = "{}:{}".format(*peer[:2])
        if not self._admission.admit(str(peer[0])):
            transport.abort()
            return
        self._ip = str(peer[0])
        self._transport = transport
        if self._uses_sasl:
            ssl_object = transport.get_extra_info("ssl_object")
            certificate = ssl_object.getpeercert() if ssl_object is not None else None
            self._sasl = SaslSession(self._apis.topics.broker.authentication, self._apis.user_namespaces, certificate,
                                     self._peer)
        self._apis.connections.add(self)
        self._arm_idle_timer(self._admission.max_idle_seconds)

    def connection_lost(self, exc: Exception | None) -> None:
        self._apis.connections.discard(self)
        self._frames.clear()
        self._in_flight.clear()
        self._transport = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._muted is not None:
            self._muted.cancel()
        if self._ip is not None:
            self._admission.release(self._ip)
            self._ip = None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- back-pressure: asyncio calls these as the transport's write buffer crosses its marks
    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._drain()

    def _update_reading(self) -> None:
        """Read the socket only while nothing waits: no frame queued, answers being taken."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        hold = bool(self._frames) or self._write_paused or self._muted is not None
        if hold and self._reading:
            transport.pause_reading()
            self._reading = False
        elif not hold and not self._reading:
            transport.resume_reading()
            self._reading = True

    # -- idle connections (connectionMaxIdleMs)
    def _arm_idle_timer(self, delay: float) -> None:
        if delay > 0:
            self._idle_timer = asyncio.get_running_loop().call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        limit = self._admission.max_idle_seconds
        idle_until = self._last_active + limit
        now = time.monotonic()
        if self._in_flight or now < idle_until:
            self._arm_idle_timer(max(idle_until - now, 0.05 * limit))
            return
        log.info("Kafka client %s: idle for %.0f ms (connectionMaxIdleMs); closing", self._peer, limit * 1000)
        self.close()

    # -- requests
    def data_received(self, data: bytes) -> None:
        self._last_active = time.monotonic()
        try:
            self._frames.extend(self._decoder.feed(data))
        except FrameTooLarge as exc:
            limit = ("sasl.server.max.receive.size bounds a request before authentication"
                     if self._sasl is not None and not self._sasl.complete else "maxMessageSize bounds a Kafka request")
            self._refuse(f"{exc} ({limit})")
            return
        self._drain()

    def _drain(self) -> None:
        """Handle queued frames, up to REQUESTS_PER_TURN this turn: a run of Produce requests
        as one group, anything else one at a time."""
        self._continuing = False
        handled = 0
        while (self._frames and self._muted is None and self._converting is None and self._may_take(self._frames[0])
               and not self._write_paused and self._open()):
            if handled >= REQUESTS_PER_TURN:
                self._continuing = True
                asyncio.get_running_loop().call_soon(self._continue)
                break
            produces = self._produce_run(REQUESTS_PER_TURN - handled)
            if produces:
                self._dispatch_produces(produces)
                handled += len(produces)
            else:
                self._dispatch(self._frames.popleft())
                handled += 1
        self._update_reading()

    def _may_take(self, frame: bytes) -> bool:
        """Nothing in flight, or only produces and this is one more within the bounds."""
        in_flight = self._in_flight
        if not in_flight:
            return True
        return (len(in_flight) < PIPELINED_PRODUCES and self._in_flight_bytes + len(frame) <= PIPELINED_PRODUCE_BYTES
                and in_flight[-1].request.api_key == _PRODUCE and _is_produce(frame))

    def _produce_run(self, limit: int) -> list[bytes]:
        """The Produce requests at the head of the queue that may be taken now (at most `limit`,
        within the pipelining bounds counting those in flight): handled as one group."""
        frames = self._frames
        taken: list[bytes] = []
        count, size = len(self._in_flight), self._in_flight_bytes
        while frames and len(taken) < limit and _is_produce(frames[0]):
            if taken and (count >= PIPELINED_PRODUCES or size + len(frames[0]) > PIPELINED_PRODUCE_BYTES):
                break
            frame = frames.popleft()
            taken.append(frame)
            count += 1
            size += len(frame)
        return taken

    def _open(self) -> bool:
        """Not closed nor closing: a refused SASL exchange's answer is the connection's last."""
        return self._transport is not None and not self._transport.is_closing()

    def _continue(self) -> None:
        if self._continuing:
            self._drain()

    def _refuse(self, reason: str) -> None:
        log.warning("Kafka client %s: %s; closing its connection", self._peer, reason)
        self.close()

    def _dispatch(self, frame: bytes) -> None:
        request = self._decode(frame)
        if request is None:
            return
        try:
            result = self._handle(request)
        except _Refused as exc:
            self._refuse(str(exc))
            return
        except Exception:
            log.exception("Kafka client %s: API key %d v%d failed", self._peer, request.api_key, request.api_version)
            self.close()
            return
        self._answer(request, result, len(frame))

    def _dispatch_produces(self, frames: list[bytes]) -> None:
        """Produce requests taken together: stored with one append per partition (ProduceApi),
        answered each in its turn. A frame that does not decode ends the group there."""
        requests = []
        for frame in frames:
            request = self._decode(frame)
            if request is None:
                break
            requests.append(request)
        if not requests:
            return
        try:
            results, converting = self._apis.produce.produce_group(requests, self._session(_PRODUCE))
        except _Refused as exc:
            self._refuse(str(exc))
            return
        except Exception:
            log.exception("Kafka client %s: %d Produce requests failed", self._peer, len(requests))
            self.close()
            return
        for request, result, frame in zip(requests, results, frames, strict=False):
            self._answer(request, result, len(frame))
        if converting is not None:
            self._converting = converting
            converting.add_done_callback(self._converted)

    def _converted(self, done: asyncio.Future[None]) -> None:
        """A group converted over several turns is taken: the requests after it may be."""
        self._converting = None
        if (exc := done.exception()) is not None:
            log.error("Kafka client %s: Produce requests failed", self._peer, exc_info=exc)
            self.close()
            return
        self._drain()

    def _decode(self, frame: bytes) -> Request | None:
        """The request in `frame`; None once it is answered (an unsupported ApiVersions) or
        refused (anything else that does not decode closes the connection)."""
        try:
            return decode_request(frame, self._apis.versions)
        except UnsupportedVersion as exc:
            if exc.api_key == API_VERSIONS:
                self._write(encode_response(API_VERSIONS, 0, exc.correlation_id,
                                            self._apis.unsupported_api_versions()))
            else:
                self._refuse(str(exc))
        except MalformedRequest as exc:
            self._refuse(f"malformed request: {exc}")
        return None

    def _answer(self, request: Request, result: Any, size: int) -> None:
        if isinstance(result, Awaitable):
            # a future (a produce's) is answered from its callback: no task, one loop turn
            answer = asyncio.ensure_future(result)
            self._in_flight.append(_InFlight(request, answer, size))
            self._in_flight_bytes += size
            answer.add_done_callback(self._settle)
        elif result is not NO_RESPONSE:
            self._write(encode_response(request.api_key, request.api_version, request.correlation_id, result))

    def _handle(self, request: Request) -> Any:
        """SASL requests to the session (refused with ILLEGAL_SASL_STATE on a listener without
        SASL, as Kafka's PLAINTEXT listeners do); the rest to the APIs."""
        if request.api_key in SASL_APIS:
            if self._sasl is None:
                return sasl_response(request, ErrorCode.illegal_sasl_state, "this listener has no SASL")
            return self._sasl.handle(request)
        return self._apis.handle(request, self._session(request.api_key))

    def _session(self, api_key: int) -> Access:
        """The access a request other than SASL's is handled with: on a SASL listener nothing
        but ApiVersions before the session completes, and nothing once its credentials expired."""
        sasl = self._sasl
        if sasl is not None and api_key != API_VERSIONS:
            if not sasl.complete:
                raise _Refused(f"API key {api_key} before SASL authentication (illegal SASL state)")
            if sasl.expired():
                raise _Refused(f"the credentials of role {sasl.role!r} expired")
            if self._access.role != sasl.role:
                self._access = self._apis.access(sasl.role, self._address, sasl.namespace)
        return self._access

    def _settle(self, _done: asyncio.Future[Any]) -> None:
        """Deferred answers written in request order, as far as they are ready; then the next
        requests taken."""
        in_flight = self._in_flight
        answers = []  # written together: a group commit settles many produces at once
        throttle = 0.0
        while in_flight and in_flight[0].answer.done():
            head = in_flight.popleft()
            self._in_flight_bytes -= head.size
            if self._transport is None or head.answer.cancelled():
                return
            if (exc := head.answer.exception()) is not None:
                log.error("Kafka client %s: a request failed", self._peer, exc_info=exc)
                self.close()
                return
            body = head.answer.result()
            request = head.request
            if body is not NO_RESPONSE:
                answers.append(encode_response(request.api_key, request.api_version, request.correlation_id, body))
                if request.api_key == _PRODUCE:
                    throttle = max(throttle, _throttle_seconds(body))
        if answers:
            self._write(answers[0] if len(answers) == 1 else b"".join(answers))
        if throttle:
            self._mute(throttle)
        self._drain()

    def _mute(self, seconds: float) -> None:
        """Kafka's quota rule: a client told to wait (throttle_time_ms) is not read from until
        its wait is over, whether or not it honours the wait itself."""
        self._muted = hold_for(self._muted, seconds, self._unmute)

    def _unmute(self) -> None:
        self._muted = None
        self._drain()

    def _write(self, response: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        transport.write(response)
        self._last_active = time.monotonic()
        sasl = self._sasl
        if sasl is not None:
            if sasl.closing:  # a refused SASL exchange: asyncio sends the answer before closing
                self.close()
            elif sasl.complete and self._decoder.max_frame_size != self._max_frame:
                self._decoder.max_frame_size = self._max_frame


def _is_produce(frame: bytes) -> bool:
    return len(frame) >= 2 and _API_KEY.unpack_from(frame)[0] == _PRODUCE


def _throttle_seconds(body: Any) -> float:
    """The wait a produce answer tells (an encoded template, never throttled, tells none)."""
    wait = getattr(body, "throttle_time", None)
    return wait.total_seconds() if wait else 0.0
