"""A test broker in a thread of the test's own process, on an event loop of its own.

It starts in a fraction of a second (no interpreter to start, nothing to import twice) and
its log records go through the test process's logging, so pytest shows them beside a failure.
It leaves the process as it found it: no signal handlers, no logging configuration, no
event-loop policy, no garbage-collector or file-limit changes (those are the command's);
brokers on different data dirs run side by side, and two on one data dir are refused by the
data dir's lock as two processes would be.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from magnetar.testing.harness import STOP_TIMEOUT_SECONDS, Listening, StandaloneBroker

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.config.loading import LoadedConfiguration
    from magnetar.cli.standalone import Standalone

_thread_ids = itertools.count(1)


class InProcessBroker(StandaloneBroker):
    """The broker runs in a daemon thread, so one a test forgets to stop never holds up the
    interpreter's exit (its data is then only as durable as a crash leaves it)."""

    _thread: threading.Thread | None = None
    _guard: threading.Lock
    """Orders a stop against the broker's thread publishing its loop."""
    _loop: asyncio.AbstractEventLoop | None = None
    _stopping: asyncio.Event | None = None
    _stop_requested = False
    _failure: BaseException | None = None

    def _start(self, loaded: LoadedConfiguration) -> Listening:
        loaded.log_summary()
        ready: Future[Listening] = Future()
        self._guard = threading.Lock()
        self._loop = self._stopping = self._failure = None
        self._stop_requested = False
        self._thread = threading.Thread(target=self._run, args=(loaded.config, ready),
                                        name=f"magnetar-test-broker-{next(_thread_ids)}", daemon=True)
        self._thread.start()
        try:
            return ready.result(self.start_timeout)
        except TimeoutError:
            self._stop()
            raise TimeoutError(f"the broker did not start within {self.start_timeout} s") from None
        except BaseException:
            self._join()
            raise

    def _run(self, config: ServiceConfiguration, ready: Future[Listening]) -> None:
        from magnetar.cli.standalone import event_loop_factory  # noqa: PLC0415 (lazy: see harness)

        try:
            with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
                runner.run(self._serve(config, ready))
        except BaseException as exc:  # the thread's end: nobody else would see it
            if ready.done():
                self._failure = exc
            else:
                ready.set_exception(exc)

    async def _serve(self, config: ServiceConfiguration, ready: Future[Listening]) -> None:
        from magnetar.cli.standalone import Standalone  # noqa: PLC0415 (lazy: see harness)

        standalone = Standalone(config, self.data_dir)
        await standalone.start()
        try:
            with self._guard:
                if self._stop_requested:  # the caller gave up waiting
                    return
                self._loop, self._stopping = asyncio.get_running_loop(), asyncio.Event()
            ready.set_result(_listening(standalone))
            await self._stopping.wait()
        finally:
            with self._guard:
                self._loop = None  # closed soon: a stop from now on has nothing to wake
            await standalone.stop()

    def _stop(self) -> None:
        with self._guard:
            self._stop_requested = True
            if self._loop is not None and self._stopping is not None:
                self._loop.call_soon_threadsafe(self._stopping.set)
        self._join()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise RuntimeError(f"the broker did not stop cleanly: {failure!r}") from failure

    def _join(self) -> None:
        assert self._thread is not None
        self._thread.join(STOP_TIMEOUT_SECONDS)
        if self._thread.is_alive():
            raise TimeoutError(f"the broker's thread {self._thread.name} did not end within {STOP_TIMEOUT_SECONDS} s")


def _listening(standalone: Standalone) -> Listening:
    service, admin = standalone.service, standalone.admin
    assert service is not None and admin is not None
    return Listening.from_urls(service.service_urls, admin.bound_urls())
