"""The sync thread's group-commit rule: how long a group waits before its write and fsync."""

from __future__ import annotations

import math
import threading

import pytest

from magnetar.storage.group_commit import SyncThread, group_wait

MAX_DELAY = 0.001


@pytest.mark.parametrize(
    ("first_job_at", "idle_since", "last_commit_took", "expected"),
    [
        (10.0, 9.0, 0.0004, 0.0),  # idle longer than a commit takes: a trickle, nothing to gather
        (10.0, 9.9996, 0.0004, 0.0),  # idle exactly one commit's length: still a trickle
        (10.0, 9.9999, 0.0004, 0.0004),  # busy, fast disk: as long as a commit takes
        (10.0, 10.2, 0.0004, 0.0004),  # queued while the last commit ran
        (10.0, 10.2, 0.005, MAX_DELAY),  # busy, slow disk: never more than the bound
        (10.0, 9.0, math.inf, MAX_DELAY),  # no commit yet (and never adaptive): the full bound
    ],
)
def test_group_wait(first_job_at: float, idle_since: float, last_commit_took: float, expected: float) -> None:
    assert group_wait(first_job_at, idle_since, last_commit_took, MAX_DELAY) == pytest.approx(expected)


def test_a_group_queued_during_a_commit_waits_that_commit_not_the_bound() -> None:
    """Appends that arrive while a commit runs are cut once as long as that commit took has
    passed: with a bound of a minute, the second group still commits as soon as the test
    lets the first one finish (it used to wait the whole bound)."""
    holding, release = threading.Event(), threading.Event()
    ran: list[str] = []
    done = threading.Event()

    def quick() -> None:
        ran.append("quick")

    def held() -> None:
        ran.append("held")
        holding.set()
        release.wait(30)

    def queued_meanwhile() -> None:
        ran.append("queued")
        done.set()

    sync = SyncThread(60.0, 3600.0, lambda: None, name="test-group-commit", adaptive=True)
    try:
        sync.schedule(quick)
        sync.hurry()  # the first group ever waits the bound (no commit measured yet): cut it
        sync.schedule(held)  # idle since: a trickle, runs at once
        assert holding.wait(30)
        sync.schedule(queued_meanwhile)
        release.set()
        assert done.wait(30), "the group queued during a commit waited out the one-minute bound"
    finally:
        release.set()
        sync.stop()
    assert ran == ["quick", "held", "queued"]


def test_without_adaptive_every_group_waits_the_bound() -> None:
    """The trimmer's debounce: scheduling again within the delay is one run."""
    sync = SyncThread(60.0, 3600.0, lambda: None, name="test-debounce")
    runs: list[int] = []
    try:
        sync.schedule(lambda: runs.append(1))
        sync.schedule(lambda: runs.append(2))
        assert runs == []
    finally:
        sync.stop()  # runs what is queued
    assert sorted(runs) == [1, 2]
