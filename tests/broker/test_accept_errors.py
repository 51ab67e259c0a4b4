"""accept() out of file descriptors: one report per interval, and one retry per second."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.broker.transport.accept_errors import AcceptErrorReporter

SERVER = Path(__file__).with_name("emfile_server.py")


class FakeLoop:
    def __init__(self) -> None:
        self.default_handled: list[dict] = []

    def default_exception_handler(self, context: dict) -> None:
        self.default_handled.append(context)


def accept_error(code: int = errno.EMFILE) -> dict:
    return {"message": "socket.accept() out of system resource", "exception": OSError(code, os.strerror(code))}


def test_accept_resource_errors_are_reported_once_per_interval(caplog):
    now = [0.0]
    reporter = AcceptErrorReporter(10.0, clock=lambda: now[0])
    loop = FakeLoop()
    for second in range(25):
        now[0] = float(second)
        for _ in range(100):
            reporter(loop, accept_error(errno.ENFILE if second % 2 else errno.EMFILE))
    lines = [r.getMessage() for r in caplog.records if "cannot accept connections" in r.getMessage()]
    assert len(lines) == 3  # at 0, 10 and 20 s
    assert "(0 more since the last report" in lines[0]
    assert "(999 more since the last report" in lines[1]
    assert reporter.suppressed == 499 and loop.default_handled == []


@pytest.mark.parametrize(
    "context",
    [
        {"message": "Exception in callback", "exception": OSError(errno.EMFILE, "Too many open files")},
        {"message": "socket.accept() out of system resource", "exception": OSError(errno.ECONNRESET, "reset")},
        {"message": "Task exception was never retrieved", "exception": ValueError("x")},
    ],
)
def test_other_errors_go_to_the_previous_handler(context):
    loop = FakeLoop()
    AcceptErrorReporter()(loop, context)
    assert loop.default_handled == [context]
    chained: list[dict] = []
    AcceptErrorReporter(fallback=lambda _loop, ctx: chained.append(ctx))(loop, context)
    assert chained == [context]


def test_broker_event_loop_retries_once_a_second_and_accepts_again():
    child = subprocess.Popen(
        [sys.executable, str(SERVER)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        port = int(child.stdout.readline())
        waiting = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
        outcome = json.loads(child.stdout.readline())
        assert child.wait(10) == 0
    finally:
        child.kill()
    for sock in waiting:
        sock.close()
    # asyncio's selector loop in Python 3.11 reports and reschedules up to 100 times per
    # round, and its rounds multiply: thousands in 3 s. One per second is what it means to do.
    assert 1 <= outcome["failures"] <= 5, outcome
    assert outcome["reported"] == 1
    assert outcome["accepted"] == 20  # every waiting client, once descriptors are free
    assert child.stderr.read().count("cannot accept connections") == 1
