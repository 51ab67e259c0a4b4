"""The sync thread: turns many appends into one write and one fsync."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class SyncThread:
    """Runs queued commit jobs in a background thread, plus a periodic housekeeping job.

    One thread per factory, not per ledger: the group an fsync covers grows while the
    previous fsync runs, whatever the number of topics, and a broker with thousands of
    topics should not own thousands of threads. A job is a managed ledger's "commit what is
    pending" method; scheduling it again before it ran is a no-op, which is what batches.
    A group is cut before its wait is over once enough bytes are queued (hurry()).

    With `adaptive`, the wait adapts to the load: it only pays while appends arrive faster than commits
    complete. The first job after the thread sat idle for at least as long as its last
    commit took runs at once, as a trickle (a producer sending one message at a time, a
    thousand a second) would gather nothing by waiting and only add the delay to every
    message's latency; appends that keep coming while commits run wait out the delay as
    before, so a busy broker still shares one fsync among many (a zero delay there triples
    the commits and their cost to the loop). Durability is the same either way: callbacks
    run after the fsync.
    """

    def __init__(
        self, max_delay: float, period: float, periodic: Callable[[], None], name: str = "magnetar-storage-sync",
        *, adaptive: bool = False,
    ) -> None:
        self._max_delay = max_delay
        self._period = period
        self._periodic = periodic
        self._jobs: dict[Callable[[], None], None] = {}
        self._first_job_at = 0.0
        self._idle_since = time.monotonic()
        self._last_commit_took = float("inf")
        """How long the last batch of jobs ran; infinite until one has, and always without
        `adaptive` (then every group waits out the delay: the trimmer's debounce)."""
        self._adaptive = adaptive
        self._stopping = False
        self._hurried = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, job: Callable[[], None]) -> None:
        with self._cond:
            if not self._jobs:
                self._first_job_at = time.monotonic()
                self._cond.notify()
            self._jobs[job] = None

    def hurry(self) -> None:
        """Run the queued jobs without waiting out the delay: their group is big enough."""
        with self._cond:
            self._hurried = True
            self._cond.notify()

    def stop(self) -> None:
        """Run what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _next_batch(self, periodic_due: float) -> tuple[list[Callable[[], None]], bool]:
        with self._cond:
            while not self._jobs and not self._stopping and time.monotonic() < periodic_due:
                self._cond.wait(periodic_due - time.monotonic())
            if self._jobs and not self._stopping and self._first_job_at - self._idle_since < self._last_commit_took:
                # Waiting here (with no wake-ups from further appends) lets appends that
                # keep coming share one fsync instead of each paying for its own.
                deadline = self._first_job_at + self._max_delay
                while (remaining := deadline - time.monotonic()) > 0 and not self._stopping and not self._hurried:
                    self._cond.wait(remaining)
            self._hurried = False
            jobs = list(self._jobs)
            self._jobs.clear()
            return jobs, self._stopping

    def _run(self) -> None:
        periodic_due = time.monotonic() + self._period
        while True:
            jobs, stopping = self._next_batch(periodic_due)
            if jobs:
                started = time.monotonic()
                for job in jobs:
                    self._run_safely(job)
                self._idle_since = time.monotonic()
                if self._adaptive:
                    self._last_commit_took = self._idle_since - started
            if time.monotonic() >= periodic_due:
                self._run_safely(self._periodic)
                self._idle_since = time.monotonic()
                periodic_due = self._idle_since + self._period
            if stopping and not jobs:
                return

    @staticmethod
    def _run_safely(job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:
            # Jobs report their own failures to their callers; this only keeps the thread
            # alive for the other topics if one has a bug.
            log.exception("storage sync job failed")
