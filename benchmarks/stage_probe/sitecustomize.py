"""Stage timings inside a `magnetar standalone` started by a benchmark (latency_bench.py --stages).

Python imports this module at start-up when its directory is on PYTHONPATH; it does nothing
unless STAGE_PROBE_FILE is set and the process is a standalone broker. It then wraps a few
broker and storage functions to time each stage of a publish, and writes their
distributions (ms) to STAGE_PROBE_FILE twice a second; creating STAGE_PROBE_FILE + ".reset"
starts them afresh (the file is removed once done). Diagnostics only: the wrappers cost
CPU, so compare probed brokers with probed brokers.

Stages: `publish` SEND read to receipt written (the broker's pulsar_broker_publish_latency);
`queue_wait` a group's first append to the sync thread taking the group; `commit_group` one
managed ledger's write and fsync; `hop` durable to the completion running on the loop;
`drain` one pass of the loop over the completions; `cursor_flush` a periodic cursor commit;
`loop_iteration` one turn of the event loop, its wait for events left out; and
`cpu_us_per_message` the process's CPU time per published message.
"""

from __future__ import annotations

import json
import os
import selectors
import sys
import threading
import time


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    count = len(ordered)

    def at(q: float) -> float:
        return round(ordered[min(count - 1, int(q * count))] * 1000, 3)

    return {"count": count, "mean": round(sum(ordered) / count * 1000, 3), "p50": at(0.5), "p99": at(0.99),
            "p99.9": at(0.999), "max": at(1.0)}


def _timed(stats: list[float], fn):  # wraps functions of any signature
    clock = time.monotonic

    def wrapper(*args, **kwargs):
        started = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            stats.append(clock() - started)

    return wrapper


def _install(path: str) -> None:
    from asyncio import base_events  # noqa: PLC0415

    from magnetar.broker.topics import latency, loop_bridge  # noqa: PLC0415
    from magnetar.storage import appends, group_commit  # noqa: PLC0415

    stats: dict[str, list[float]] = {name: [] for name in (
        "publish", "queue_wait", "commit_group", "hop", "drain", "cursor_flush", "loop_iteration")}
    cpu = {"messages": 0, "first": None, "last": None}
    clock = time.monotonic

    waited = threading.local()  # per thread: another loop's waits are not this one's
    selector_class = selectors.DefaultSelector  # the class asyncio picks
    select = selector_class.select

    def timed_select(self, timeout=None):
        started = clock()
        try:
            return select(self, timeout)
        finally:
            waited.seconds = getattr(waited, "seconds", 0.0) + clock() - started

    selector_class.select = timed_select
    run_once = base_events.BaseEventLoop._run_once

    def timed_run_once(self):
        waited.seconds = 0.0
        started = clock()
        run_once(self)
        stats["loop_iteration"].append(clock() - started - waited.seconds)  # the turn's work, not its wait

    base_events.BaseEventLoop._run_once = timed_run_once
    loop_bridge.LoopBridge._drain = _timed(stats["drain"], loop_bridge.LoopBridge._drain)
    appends.GroupCommitAppends._commit_group = _timed(stats["commit_group"], appends.GroupCommitAppends._commit_group)

    post = loop_bridge.LoopBridge.post

    def timed_post(self, fn, *args):
        posted = clock()

        def run(*run_args):
            stats["hop"].append(clock() - posted)
            fn(*run_args)

        post(self, run, *args)

    loop_bridge.LoopBridge.post = timed_post

    observe = latency.LatencySummary.observe

    def timed_observe(self, ms, count=1):
        stats["publish"].append(ms / 1000)
        cpu["messages"] += count
        now = (time.process_time(), cpu["messages"])
        cpu["first"] = cpu["first"] or now
        cpu["last"] = now
        return observe(self, ms, count)

    latency.LatencySummary.observe = timed_observe

    next_batch = group_commit.SyncThread._next_batch

    def timed_next_batch(self, periodic_due):
        jobs, stopping = next_batch(self, periodic_due)
        if jobs and self._adaptive:
            stats["queue_wait"].append(clock() - self._first_job_at)
        return jobs, stopping

    group_commit.SyncThread._next_batch = timed_next_batch

    run_safely = group_commit.SyncThread._run_safely

    def timed_run_safely(job):
        started = clock()
        run_safely(job)
        if getattr(job, "__name__", "") == "_flush_dirty_cursors_quietly":
            stats["cursor_flush"].append(clock() - started)

    group_commit.SyncThread._run_safely = staticmethod(timed_run_safely)

    def dump() -> None:
        while True:
            time.sleep(0.5)
            out: dict[str, object] = {name: _summary(list(values)) for name, values in stats.items()}
            first, last = cpu["first"], cpu["last"]
            if first and last and last[1] > first[1]:
                out["cpu_us_per_message"] = round((last[0] - first[0]) / (last[1] - first[1]) * 1e6, 1)
            with open(path + ".tmp", "w") as file:
                json.dump(out, file)
            os.replace(path + ".tmp", path)
            if os.path.exists(path + ".reset"):
                for values in stats.values():
                    values.clear()
                cpu.update(messages=0, first=None, last=None)
                os.remove(path + ".reset")

    threading.Thread(target=dump, name="stage-probe", daemon=True).start()


if os.environ.get("STAGE_PROBE_FILE") and "standalone" in sys.argv:
    _install(os.environ["STAGE_PROBE_FILE"])
