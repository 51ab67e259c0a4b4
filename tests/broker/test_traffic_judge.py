"""The traffic judge on timelines written out by hand: what it must let pass (what Pulsar
itself does) and what it must still catch."""

from __future__ import annotations

import pytest
from traffic import Entry, Timeline
from traffic_judge import judge

BATCH: Entry = (0, 1, 0)
KEYS = ["k1", "k2", "k3"]  # the batch goes by k1, its first message's key


class NoRunQueueWait:
    def between(self, start: float, end: float) -> float:
        return 0.0


def copy(timeline: Timeline, kind: str, consumer: str, redeliveries: int, indexes: range = range(3)) -> None:
    for index in indexes:
        timeline.record(kind, consumer=consumer, value=index, key=KEYS[index], entry=BATCH, index=index,
                        delivery=(0, redeliveries))


@pytest.mark.parametrize("nacks", [1, 2])
def test_a_copy_a_later_nack_request_took_back_is_not_held(nacks):
    """c0 nacks messages of one batch at `nacks` different times: the client sends one
    redelivery request for each, and the broker takes back whatever copy c0 then holds.
    With two, the copy that came back to c0 (count 1) may be taken back by the second request
    and go to c1 (count 2), which took the key over meanwhile, while c0's application has
    still to see copy 1: Pulsar does the same, so it is no broken promise. With one request,
    copy 1 stays with c0, and c1 must not get the batch while c0 holds it."""
    timeline = Timeline()
    for index in range(3):
        timeline.record("published", value=index, key=KEYS[index], entry=BATCH, index=index)
    timeline.record("joined", consumer="c0")
    copy(timeline, "delivered", "c0", 0)
    copy(timeline, "acked", "c0", 0, range(1))
    copy(timeline, "nacked", "c0", 0, range(1, 1 + nacks))
    timeline.record("joined", consumer="c1")
    copy(timeline, "delivered", "c1", 2)
    copy(timeline, "acked", "c1", 2, range(1))
    copy(timeline, "delivered", "c0", 1)
    copy(timeline, "acked", "c0", 1)
    copy(timeline, "acked", "c1", 2, range(1, 3))
    timeline.record("finished")

    problems = judge(timeline, NoRunQueueWait(), ordered=True).problems

    if nacks == 2:
        assert problems == []
    else:
        assert problems and all("reached c0 while ['c1'] held" in problem for problem in problems)
