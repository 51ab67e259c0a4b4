"""One Kafka client connection: frames in, requests dispatched, responses out in request order.

On a SASL listener the connection holds a SaslSession: until it completes only ApiVersions
and the SASL requests are read, and the role it names is what every request is authorized
as (see access and sasl). Kafka clients pipeline requests and match responses by order as well as correlation id, so
a produce waiting for its entries to be durable holds back the responses after it. A
request that does not parse closes this connection (as a Kafka broker does) and nothing else.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

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


class _Refused(Exception):
    """A request Kafka answers by closing the connection; the message says why."""


class KafkaConnection(asyncio.Protocol):
    def __init__(self, apis: KafkaApis, max_frame_size: int, *, sasl: bool, address: tuple[str, int]) -> None:
        self._apis = apis
        self._decoder = FrameDecoder(max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._slots: deque[asyncio.Future[bytes | None]] = deque()
        self._peer = "?"
        self._uses_sasl = sasl
        self._sasl: SaslSession | None = None
        self._address = address
        self._access: Access = apis.access(None, address)  # a SASL connection's, once it authenticates

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._peer = "{}:{}".format(*(transport.get_extra_info("peername") or ("?", "?"))[:2])
        if self._uses_sasl:
            ssl_object = transport.get_extra_info("ssl_object")
            certificate = ssl_object.getpeercert() if ssl_object is not None else None
            self._sasl = SaslSession(self._apis.topics.broker.authentication, self._apis.user_namespaces, certificate,
                                     self._peer)
        self._apis.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._apis.connections.discard(self)
        for slot in self._slots:
            slot.cancel()
        self._slots.clear()
        self._transport = None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameTooLarge as exc:
            self._refuse(f"{exc} (maxMessageSize bounds a Kafka request)")
            return
        for frame in frames:
            if self._transport is None:
                return
            self._dispatch(frame)

    def _refuse(self, reason: str) -> None:
        log.warning("Kafka client %s: %s; closing its connection", self._peer, reason)
        self.close()

    def _dispatch(self, frame: bytes) -> None:
        try:
            request = decode_request(frame, self._apis.versions)
        except UnsupportedVersion as exc:
            if exc.api_key == API_VERSIONS:
                self._queue_ready(encode_response(API_VERSIONS, 0, exc.correlation_id,
                                                  self._apis.unsupported_api_versions()))
            else:
                self._refuse(str(exc))
            return
        except MalformedRequest as exc:
            self._refuse(f"malformed request: {exc}")
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
        if isinstance(result, Awaitable):
            # a future (a produce's) is answered from its callback: no task, one loop turn
            slot: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
            asyncio.ensure_future(result).add_done_callback(partial(self._settle, request, slot))
            self._slots.append(slot)
        elif result is not NO_RESPONSE:
            self._queue_ready(encode_response(request.api_key, request.api_version, request.correlation_id, result))

    def _handle(self, request: Request) -> Any:
        """Kafka's SASL rules around the dispatch: SASL requests to the session (refused with
        ILLEGAL_SASL_STATE on a listener without SASL, as Kafka's PLAINTEXT listeners do), nothing
        but ApiVersions before the session completes, and nothing once its credentials expired."""
        sasl = self._sasl
        if request.api_key in SASL_APIS:
            if sasl is None:
                return sasl_response(request, ErrorCode.illegal_sasl_state, "this listener has no SASL")
            return sasl.handle(request)
        if sasl is not None and request.api_key != API_VERSIONS:
            if not sasl.complete:
                raise _Refused(f"API key {request.api_key} before SASL authentication (illegal SASL state)")
            if sasl.expired():
                raise _Refused(f"the credentials of role {sasl.role!r} expired")
            if self._access.role != sasl.role:
                self._access = self._apis.access(sasl.role, self._address, sasl.namespace)
        return self._apis.handle(request, self._access)

    def _settle(self, request: Request, slot: asyncio.Future[bytes | None], pending: asyncio.Future[Any]) -> None:
        """A deferred response encoded into its slot, and what is ready written."""
        if slot.done():  # cancelled: the connection is gone
            return
        if pending.cancelled():
            slot.cancel()
        elif (exc := pending.exception()) is not None:
            slot.set_exception(exc)
        else:
            body = pending.result()
            slot.set_result(None if body is NO_RESPONSE else
                            encode_response(request.api_key, request.api_version, request.correlation_id, body))
        self._flush()

    def _queue_ready(self, response: bytes) -> None:
        if not self._slots and self._transport is not None:
            self._transport.write(response)
            self._close_if_refused()
            return
        done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        done.set_result(response)
        self._slots.append(done)
        self._flush()

    def _flush(self) -> None:
        slots = self._slots
        while slots and slots[0].done():
            slot = slots.popleft()
            if self._transport is None or slot.cancelled():
                continue
            if slot.exception() is not None:
                log.error("Kafka client %s: a request failed", self._peer, exc_info=slot.exception())
                self.close()
                return
            response = slot.result()
            if response is not None:
                self._transport.write(response)
        self._close_if_refused()

    def _close_if_refused(self) -> None:
        """After a refused SASL exchange's answer is written (asyncio sends it before closing)."""
        if self._sasl is not None and self._sasl.closing and not self._slots:
            self.close()
