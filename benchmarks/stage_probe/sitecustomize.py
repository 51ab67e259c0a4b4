"""Stage timings inside a `magnetar standalone` started by a benchmark (latency_bench.py --stages).

Python imports this module at start-up when its directory is on PYTHONPATH; it does nothing
unless STAGE_PROBE_FILE is set and the process is a standalone broker. It then wraps a few
broker and storage functions to time each stage of a publish. Creating STAGE_PROBE_FILE +
".read" asks for their distributions (ms), written to STAGE_PROBE_FILE; creating
STAGE_PROBE_FILE + ".reset" starts them afresh (a request file is removed once answered).
Diagnostics only: the wrappers cost CPU, so compare probed brokers with probed brokers.
STAGE_PROBE_SWITCH_INTERVAL (seconds), when set, is the probed broker's
sys.setswitchinterval: run once with it and once without to see how much of a stage was a
thread waiting for the GIL.

Stages: `publish` SEND read to receipt written (the broker's pulsar_broker_publish_latency);
`queue_wait` a group's first append to the sync thread taking the group; `commit_group` one
managed ledger's write and fsync, `fdatasync` the fsync alone (of a ledger's data file),
`data_write` the data file's write alone (with `O_DSYNC`, the default, it is the fsync too
and `fdatasync` stays empty);
`hop` durable to the completion running on the loop;
`drain` one pass of the loop over the completions; `cursor_flush` a periodic cursor commit;
`loop_iteration` one turn of the event loop, its wait for events left out; and
`cpu_us_per_message` the process's CPU time per published message.

Each SEND's own moments are kept too, by sequence id (one producer a cell): read from the
socket, handed to the topic, its group taken by the sync thread, that group's write
started, durable, its completion run on the loop, its receipt queued. Creating
STAGE_PROBE_FILE + ".timeline" asks for them: the probe writes them to that file + ".json" as
{"sends": {sequence id: [seconds on CLOCK_MONOTONIC, ...]} (see TIMELINE), "long_turns":
[[start, end, CPU seconds], ...] (the loop's turns working over LONG_TURN)}; both start
afresh with the next reset.
"""

from __future__ import annotations

import json
import os
import selectors
import sys
import threading
import time

LONG_TURN = 0.002
TIMELINE = ("read", "handed", "taken", "commit_started", "durable", "on_loop", "answered")


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

    from magnetar.broker.topics import latency, loop_bridge, producer  # noqa: PLC0415
    from magnetar.storage import appends, group_commit, ledger  # noqa: PLC0415

    stats: dict[str, list[float]] = {name: [] for name in (
        "publish", "queue_wait", "commit_group", "fdatasync", "data_write", "hop", "drain", "cursor_flush",
        "loop_iteration")}
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

    long_turns: list[tuple[float, float, float]] = []
    """(start, end, CPU seconds) of each loop turn whose work took over LONG_TURN: a turn
    that took long on the wall clock but little CPU was the thread waiting for a core."""

    def timed_run_once(self):
        waited.seconds = 0.0
        started, cpu = clock(), time.thread_time()
        run_once(self)
        ended = clock()
        work = ended - started - waited.seconds  # the turn's work, not its wait
        stats["loop_iteration"].append(work)
        if work > LONG_TURN:
            long_turns.append((started, ended, time.thread_time() - cpu))

    base_events.BaseEventLoop._run_once = timed_run_once
    ledger.fdatasync = _timed(stats["fdatasync"], ledger.fdatasync)
    ledger._write_records = _timed(stats["data_write"], ledger._write_records)
    loop_bridge.LoopBridge._drain = _timed(stats["drain"], loop_bridge.LoopBridge._drain)
    appends.GroupCommitAppends._commit_group = _timed(stats["commit_group"], appends.GroupCommitAppends._commit_group)

    timeline: dict[int, list[float]] = {}
    sync = {"taken": 0.0, "commit_started": 0.0}  # the sync thread's current group (one thread)
    completing: list[tuple[float, ...]] = [()]  # the sync-thread moments of the completion running

    commit_group = appends.GroupCommitAppends._commit_group

    def marked_commit_group(self, group, later):
        sync["commit_started"] = clock()
        return commit_group(self, group, later)

    appends.GroupCommitAppends._commit_group = marked_commit_group
    publish_group = producer.Producer._publish_group

    def marked_publish_group(self, sends, *args, **kwargs):
        handed = clock()
        for send in sends:
            timeline[send.sequence_id] = [self.cnx.read_at, handed, 0.0, 0.0, 0.0, 0.0, 0.0]
        return publish_group(self, sends, *args, **kwargs)

    producer.Producer._publish_group = marked_publish_group
    stored = producer.Producer._stored

    def marked_stored(self, group, *args, **kwargs):
        moments = completing[0]
        if moments:
            on_loop = clock()
            for send in group.sends:
                if (row := timeline.get(send.sequence_id)) is not None:
                    row[2:6] = [*moments, on_loop]
        return stored(self, group, *args, **kwargs)

    producer.Producer._stored = marked_stored
    flush = producer.Producer._flush

    def marked_flush(self):
        before = list(self._pending)
        flush(self)
        answered = clock()
        for group in before[:len(before) - len(self._pending)]:
            for send in group.sends:
                if (row := timeline.get(send.sequence_id)) is not None:
                    row[6] = answered

    producer.Producer._flush = marked_flush
    post = loop_bridge.LoopBridge.post

    def timed_post(self, fn, *args):
        posted = clock()
        moments = (sync["taken"], sync["commit_started"], posted)

        def run(*run_args):
            stats["hop"].append(clock() - posted)
            completing[0] = moments
            try:
                fn(*run_args)
            finally:
                completing[0] = ()

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
        if jobs and self._adaptive:  # the storage sync thread (the trimmer's and cursors' are not)
            sync["taken"] = clock()
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

    def write_summary() -> None:
        out: dict[str, object] = {name: _summary(list(values)) for name, values in stats.items()}
        first, last = cpu["first"], cpu["last"]
        if first and last and last[1] > first[1]:
            out["cpu_us_per_message"] = round((last[0] - first[0]) / (last[1] - first[1]) * 1e6, 1)
        with open(path + ".tmp", "w") as file:
            json.dump(out, file)
        os.replace(path + ".tmp", path)

    def write_timeline() -> None:
        with open(path + ".timeline.tmp", "w") as file:
            json.dump({"sends": timeline, "long_turns": long_turns}, file)
        os.replace(path + ".timeline.tmp", path + ".timeline.json")

    def reset() -> None:
        timeline.clear()
        long_turns.clear()
        for values in stats.values():
            values.clear()
        cpu.update(messages=0, first=None, last=None)

    def serve() -> None:
        # Only on request: sorting and writing tens of thousands of figures holds the GIL
        # for milliseconds, which would stall the loop being measured.
        requests = {".read": write_summary, ".timeline": write_timeline, ".reset": reset}
        while True:
            time.sleep(0.05)
            for suffix, answer in requests.items():
                if os.path.exists(path + suffix):
                    answer()
                    os.remove(path + suffix)

    threading.Thread(target=serve, name="stage-probe", daemon=True).start()


if os.environ.get("STAGE_PROBE_FILE") and "standalone" in sys.argv:
    _install(os.environ["STAGE_PROBE_FILE"])
    if os.environ.get("STAGE_PROBE_SWITCH_INTERVAL"):
        # An experiment, not a setting: how much of a stage was a thread waiting for the GIL
        # (a thread back from a write or fsync waits up to this long for a busy loop to let go).
        sys.setswitchinterval(float(os.environ["STAGE_PROBE_SWITCH_INTERVAL"]))
