"""The HTTP connection's states (magnetar.web.connection_state): the table itself, and what
it decides on real sockets. A connection that ends after its answers (an Upgrade request, the
server shutting down) lingers LINGER_SECONDS for the client's last bytes, then goes, even
while its client keeps its side open: it does not wait out the keep-alive of a connection that
goes on (it did, the linger replaced by keep-alive once the last answer was written)."""

from __future__ import annotations

import asyncio

import pytest
from polling import wait_for_async

from magnetar import web
from magnetar.web import server as web_server
from magnetar.web.connection_state import DEADLINES, TRANSITIONS, ConnectionState, Deadline, Event, Pause, Phase

LONG = 30.0
"""Keep-alive and shutdown grace in these tests: what a connection must not wait out."""


def test_a_phase_only_moves_forward() -> None:
    state = ConnectionState()
    assert state.reads_requests and state.on(Event.SHUTDOWN) is Phase.LAST and not state.reads_requests
    refusal = web.fail(408, "too slow")
    assert state.on(Event.REFUSED, refusal) is Phase.LAST and state.refusal is refusal
    assert not state.closes_with(more_queued=False)  # the refusal is the last answer, not this one
    assert state.on(Event.CLOSE) is Phase.CLOSING
    assert state.on(Event.SHUTDOWN) is Phase.CLOSING and state.on(Event.UPGRADE) is Phase.CLOSING
    assert state.on(Event.LOST) is Phase.CLOSED and state.on(Event.CLOSE) is Phase.CLOSED
    assert set(TRANSITIONS) == set(Event) and set(DEADLINES) == set(Phase)


def test_the_last_answer_closes_only_once_no_more_requests_are_read() -> None:
    state = ConnectionState()
    assert not state.closes_with(more_queued=False)
    state.on(Event.UPGRADE)
    assert state.closes_with(more_queued=False) and not state.closes_with(more_queued=True)


def test_reading_resumes_when_the_last_reason_to_pause_goes() -> None:
    state = ConnectionState()
    assert state.pause(Pause.BODY) and not state.pause(Pause.PIPELINE) and not state.pause(Pause.BODY)
    assert not state.resume(Pause.BODY) and not state.resume(Pause.REFUSED)
    assert state.resume(Pause.PIPELINE) and not state.resume(Pause.PIPELINE)
    assert not state.resume_all()
    state.pause(Pause.REFUSED)
    assert state.resume_all() and state.pause(Pause.BODY)


@pytest.mark.parametrize(("phase", "runs"), [
    (Phase.OPEN, {Deadline.HEAD, Deadline.KEEP_ALIVE}), (Phase.LAST, {Deadline.HEAD}),
    (Phase.CLOSING, {Deadline.LINGER}), (Phase.CLOSED, set()),
])
def test_each_phase_runs_its_own_deadlines(phase: Phase, runs: set[Deadline]) -> None:
    state = ConnectionState()
    state.phase = phase
    assert {deadline for deadline in Deadline if state.runs(deadline)} == runs


async def _last_answer_then_linger(request: bytes, *, shut_down: bool) -> None:
    answer = asyncio.Event()

    async def held(_request: web.Request) -> web.Response:
        await answer.wait()
        return web.Response(text="ok")

    router = web.Router()
    router.add_routes([web.get("/held", held)])
    server = web.WebServer(router, [], head_seconds=LONG)
    port = await server.listen("127.0.0.1", 0, None)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        assert await wait_for_async(lambda: any(c.serving for c in server.connections))
        closing = asyncio.ensure_future(server.close()) if shut_down else None
        answer.set()
        assert (await reader.read()).startswith(b"HTTP/1.1 200 OK")  # the answer, then the server's EOF
        # the client keeps its side open: the server must let go after the linger, not keep-alive
        assert await wait_for_async(lambda: not server.connections, timeout=LONG / 3), "kept past the linger"
        if closing is not None:
            await closing
    finally:
        writer.close()
        await server.close()


@pytest.fixture
def long_keep_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web_server, "KEEPALIVE_SECONDS", LONG)
    monkeypatch.setattr(web_server, "SHUTDOWN_GRACE_SECONDS", LONG)
    monkeypatch.setattr(web_server, "LINGER_SECONDS", 0.2)


@pytest.mark.usefixtures("long_keep_alive")
def test_an_upgrade_requests_connection_lingers_then_goes() -> None:
    asyncio.run(_last_answer_then_linger(
        b"GET /held HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", shut_down=False))


@pytest.mark.usefixtures("long_keep_alive")
def test_a_connection_answered_during_shutdown_lingers_then_goes() -> None:
    asyncio.run(_last_answer_then_linger(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n", shut_down=True))
