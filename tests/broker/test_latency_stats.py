"""The broker's latency recorders, on a real event loop: buckets where Pulsar puts them,
quantiles within the 2 % the buckets promise, and a stalled loop seen by the lag probe."""

from __future__ import annotations

import asyncio
import time

from magnetar.broker.service.loop_lag import LAG_BOUNDS_S, LoopLagProbe
from magnetar.broker.topics.latency import EntryLatencyBuckets, LatencySummary


def test_entry_buckets_count_each_range_once_and_show_the_last_interval():
    buckets = EntryLatencyBuckets()
    for ms in (0.2, 0.5, 0.51, 1.0, 7.0, 999.0, 1000.0, 1000.1):
        buckets.observe(ms)
    buckets.observe(3.0, count=5)  # a group of five entries written together
    assert buckets.last == [0] * 10  # nothing shown before the interval ends
    buckets.roll()
    assert buckets.last == [2, 2, 5, 1, 0, 0, 0, 0, 2, 1]
    assert round(buckets.last_sum, 2) == round(0.2 + 0.5 + 0.51 + 1 + 7 + 999 + 1000 + 1000.1 + 15, 2)
    buckets.roll()
    assert buckets.last == [0] * 10 and buckets.last_sum == 0


def test_summary_quantiles_are_within_two_percent_and_cover_two_intervals():
    summary = LatencySummary()
    assert summary.quantiles() == []
    for ms in range(1, 1001):
        summary.observe(float(ms))
    figures = dict(summary.quantiles())
    assert figures[0.0] == 1.0 and figures[1.0] == 1000.0
    for q, exact in ((0.5, 500), (0.95, 950), (0.99, 990), (0.999, 999)):
        assert exact * 0.98 <= figures[q] <= exact * 1.02, (q, figures[q])
    summary.roll()
    summary.observe(5000.0, count=1001)  # the current interval now outweighs the last
    assert dict(summary.quantiles())[0.5] == 5000.0
    summary.roll()
    summary.roll()
    assert summary.quantiles() == []
    assert summary.count == 2001 and summary.sum == sum(range(1, 1001)) + 5000.0 * 1001


def test_the_probe_sees_a_stalled_loop():
    async def stall() -> LoopLagProbe:
        probe = LoopLagProbe()
        probe.start(asyncio.get_running_loop())
        await asyncio.sleep(0.12)
        time.sleep(0.25)  # the loop is stuck: the probe's timer falls due at least 0.15 s before its end
        await asyncio.sleep(0.12)
        probe.stop()
        return probe

    probe = asyncio.run(stall())
    assert probe.max_seconds >= 0.1
    assert sum(probe.counts) == probe.count >= 2
    assert sum(probe.counts[LAG_BOUNDS_S.index(0.1):]) >= 1  # the stall landed in a bucket past 100 ms
    probe.roll()
    assert probe.max_seconds >= 0.1  # the last interval's maximum stays shown
    probe.roll()
    assert probe.max_seconds == 0.0
