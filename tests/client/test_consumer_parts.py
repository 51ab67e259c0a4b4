"""A consumer's redelivery part on its own: what it asks the broker for, and when acks must reach it.

`Redelivery` takes the calls it makes back into its consumer (write a frame, redeliver all,
acknowledge) as arguments, so these tests give it recording ones and a real event loop. The
integration tests (test_redelivery.py, test_scenarios.py) drive it through a consumer against
a broker; what they cannot see is a REDELIVER the broker ignores (an entry acked after its
negative ack) or an ack taken on the wrong thread, which is what `tracking` decides.
"""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
from polling import wait_for_async

from magnetar.client.aio.consumer_config import ConsumerConfig
from magnetar.client.aio.redelivery import Redelivery
from magnetar.client.message_id import MessageId
from magnetar.wire.frames import FrameDecoder, command_body
from magnetar.wire.proto import pulsar_api_pb2 as pb


class Recorder:
    """The consumer's side of the seam: frames written, full redeliveries asked for."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.full_redeliveries = 0

    def write(self, frame: bytes) -> bool:
        self.frames.append(frame)
        return True

    def redeliver_all(self) -> None:
        self.full_redeliveries += 1

    def redelivered_ids(self) -> list[set[tuple[int, int]]]:
        out = []
        for frame in self.frames:
            (decoded,) = FrameDecoder().feed(frame)
            body = command_body(decoded.command)
            out.append({(mid.ledgerId, mid.entryId) for mid in body.message_ids})
        return out


def _redelivery(recorder: Recorder, *, shared: bool, nack_delay_ms: int = 30,
                unacked_timeout_ms: int | None = None) -> Redelivery:
    config = ConsumerConfig(negative_ack_redelivery_delay_ms=nack_delay_ms,
                            unacked_messages_timeout_ms=unacked_timeout_ms)
    return Redelivery(asyncio.get_running_loop(), "persistent://public/default/t", 7, config, None, shared=shared,
                      write=recorder.write, redeliver_all=recorder.redeliver_all, acknowledge=lambda _m: None)


@pytest.mark.parametrize("seed", range(5))
def test_entries_acked_after_their_negative_ack_are_not_asked_for_again(seed: int) -> None:
    rng = random.Random(seed)
    entries = [(rng.randrange(1, 4), entry) for entry in rng.sample(range(1000), rng.randrange(1, 40))]
    acked = set(rng.sample(entries, rng.randrange(0, len(entries))))

    async def scenario() -> tuple[list[set[tuple[int, int]]], bool, bool]:
        recorder = Recorder()
        redelivery = _redelivery(recorder, shared=True)
        for ledger, entry in entries:
            redelivery.nack(MessageId(-1, ledger, entry))
        tracking_while_waiting = redelivery.tracking
        for ledger, entry in acked:
            redelivery.acked(ledger, entry)
        if len(acked) < len(entries):  # the rest come due within microseconds: one or a few frames
            assert await wait_for_async(lambda: set().union(*recorder.redelivered_ids()) >= set(entries) - acked,
                                        timeout=10, interval=0.01)
            assert await wait_for_async(lambda: not redelivery.tracking, timeout=10, interval=0.01)
        else:
            assert not redelivery.tracking  # nothing waits: no timer left to fire
        redelivery.close()
        return recorder.redelivered_ids(), tracking_while_waiting, redelivery.tracking

    frames, tracking_while_waiting, tracking_after = asyncio.run(scenario())
    rest = set(entries) - acked
    assert all(frames)
    assert set().union(*frames) == rest and sum(map(len, frames)) == len(rest)
    assert tracking_while_waiting
    assert not tracking_after


def test_acks_reach_the_tracker_while_a_nack_waits_or_the_unacked_timeout_runs() -> None:
    async def scenario() -> None:
        recorder = Recorder()
        quiet = _redelivery(recorder, shared=False, nack_delay_ms=60_000)
        assert not quiet.tracking  # the common case: acks go straight to the ack grouping
        quiet.start()
        assert not quiet.tracking  # no unacked timeout configured
        quiet.nack(MessageId(-1, 1, 1))
        quiet.nack(MessageId(-1, 1, 2))
        quiet.acked(1, 1)
        assert quiet.tracking  # (1, 2) still waits
        quiet.acked(1, 2)
        assert not quiet.tracking
        quiet.nack(MessageId(-1, 1, 3))
        assert quiet.tracking  # and again once a nack waits
        quiet.close()

        timed = _redelivery(recorder, shared=False, unacked_timeout_ms=10_000)
        assert not timed.tracking  # not subscribed yet
        timed.start()
        assert timed.tracking  # subscribed: the timeout runs
        timed.nack(MessageId(-1, 2, 1))
        timed.acked(2, 1)
        assert timed.tracking  # the timeout keeps every ack coming
        timed.close()
        assert recorder.frames == [] and recorder.full_redeliveries == 0

    asyncio.run(scenario())


def test_an_exclusive_consumer_asks_for_everything_unacked_when_a_nack_is_due() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder()
        redelivery = _redelivery(recorder, shared=False)
        redelivery.nack(MessageId(-1, 3, 9))
        assert await wait_for_async(lambda: recorder.full_redeliveries, timeout=10, interval=0.01)
        redelivery.close()
        return recorder

    recorder = asyncio.run(scenario())
    assert (recorder.full_redeliveries, recorder.frames) == (1, [])


@pytest.mark.parametrize(("seed", "why"), [(seed, why) for seed in range(3) for why in ("nack", "timeout")])
def test_acks_of_application_threads_are_taken_in_before_anything_is_asked_for_again(seed: int, why: str) -> None:
    """An application thread's ack reaches the redelivery state through its queue, without a
    loop wake-up: what it acked before a nack came due or the unacked timeout looked must not
    be asked for again, whichever of the two is waiting."""
    rng = random.Random(seed)
    entries = [(rng.randrange(1, 4), entry) for entry in rng.sample(range(1000), rng.randrange(2, 40))]
    acked = set(rng.sample(entries, rng.randrange(1, len(entries))))

    async def scenario() -> Recorder:
        recorder = Recorder()
        redelivery = _redelivery(recorder, shared=True, unacked_timeout_ms=1 if why == "timeout" else None)
        redelivery.start()
        for ledger, entry in entries:
            if why == "nack":
                redelivery.nack(MessageId(-1, ledger, entry))
            else:
                redelivery.received(pb.CommandMessage(consumer_id=7, message_id=pb.MessageIdData(
                    ledgerId=ledger, entryId=entry)), [])
        assert redelivery.tracking
        thread = threading.Thread(target=lambda: [redelivery.acked_elsewhere(*key) for key in acked])
        thread.start()
        thread.join()
        assert await wait_for_async(lambda: set().union(set(), *recorder.redelivered_ids()) >= set(entries) - acked,
                                    timeout=10, interval=0.01)
        redelivery.close()
        return recorder

    recorder = asyncio.run(scenario())
    assert set().union(*recorder.redelivered_ids()) == set(entries) - acked
    assert recorder.full_redeliveries == 0
