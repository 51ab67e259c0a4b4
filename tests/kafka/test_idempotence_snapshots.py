"""Idempotence's snapshots and rebuilds, exactly (kafka/idempotence.py): which offset a snapshot
covers while batches are in flight, when a snapshot is due, what a rebuild reads and reports,
and producer id 0, a producer like any other."""

from __future__ import annotations

import json
import logging
import time

from kafka_brokers import batch
from kafka_in_process import run_in_process
from kio.schema.errors import ErrorCode
from test_idempotence_rules import _batch, _fresh, _partition

from magnetar.kafka import idempotence
from magnetar.kafka.idempotence import ACCEPT, PartitionProducers, ProducerStates, SequenceCheck
from magnetar.kafka.producer_snapshots import SNAPSHOT_PROPERTY, Stored


async def _plain(kafka, count: int, topic: str = "t") -> None:
    """`count` entries of a producer without idempotence: the log's end moves, no producer is recorded."""
    for _ in range(count):
        assert (await kafka.produce(topic, 0, batch([b"plain"])))[0] == ErrorCode.none


def _saved(log) -> dict:
    return json.loads(log.property(SNAPSHOT_PROPERTY))


def test_producer_id_zero_is_a_producer_like_any_other(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        assert states.check(log, _batch(0, 0)) is ACCEPT
        states.stored(log, _batch(0, 0), 0)
        assert states.check(log, _batch(0, 0)) == SequenceCheck(ErrorCode.none, 0)
        assert states.check(log, _batch(0, 4)) == SequenceCheck(ErrorCode.out_of_order_sequence_number)
        assert states.check(log, _batch(0, 2)) is ACCEPT
        states.forget(log, [_batch(0, 2)])
        assert states.check(log, _batch(0, 2)) is ACCEPT

    run_in_process(tmp_path, test)


def test_a_snapshot_with_batches_in_flight_covers_only_what_is_recorded(tmp_path) -> None:
    """Batches accepted and not yet stored may land below the log's end: the snapshot must not
    claim past what it recorded, or a restart would never replay them."""
    async def test(kafka) -> None:
        log, states = await _fresh(kafka, interval=1)
        await _plain(kafka, 10)  # the log ends at 10
        first, second = _batch(1, 0), _batch(1, 2)
        assert states.check(log, first) is ACCEPT and states.check(log, second) is ACCEPT
        states.stored(log, first, 3)  # `second` still in flight
        assert _saved(log)["offset"] == 5
        states.stored(log, second, 5)  # none in flight: the snapshot covers the log to its end
        assert _saved(log)["offset"] == 10
        third = _batch(1, 4)
        assert states.check(log, third) is ACCEPT
        states.forget(log, [third])  # refused: no longer in flight
        assert states.check(log, _batch(2, 0)) is ACCEPT
        states.stored(log, _batch(2, 0), 10)
        assert _saved(log)["offset"] == 12

    run_in_process(tmp_path, test)


def test_a_snapshot_is_due_at_the_interval_or_once_the_bytes_reach_the_limit(tmp_path, monkeypatch) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka, interval=1)
        states.check(log, _batch(3, 0))
        before = int(time.time() * 1000)
        states.stored(log, _batch(3, 0), 0)  # interval 1: at once
        ((epoch, last_time, recent),) = _saved(log)["producers"].values()
        assert (epoch, recent) == (0, [[0, 0, 2]]) and before <= last_time <= int(time.time() * 1000)
        other, states = await _partition(kafka, "bytes"), ProducerStates(snapshot_interval=1000)
        monkeypatch.setattr(idempotence, "_SNAPSHOT_BYTES", 2 * len(_batch(4, 0).data))
        for n in range(2):
            assert other.property(SNAPSHOT_PROPERTY) is None
            states.check(other, _batch(4, 2 * n))
            states.stored(other, _batch(4, 2 * n), 2 * n)
        assert _saved(other)["offset"] == 4  # the second batch reached the limit exactly

    run_in_process(tmp_path, test)


def test_a_batch_stored_for_a_producer_this_partition_never_saw_is_not_recorded(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        states.check(log, _batch(5, 0))
        states.stored(log, _batch(6, 0), 0)  # unknown here (another partition's, say): ignored
        assert states.check(log, _batch(6, 0)) is ACCEPT

    run_in_process(tmp_path, test)


def test_replayed_batches_keep_to_their_epoch_and_offsets() -> None:
    producers = PartitionProducers(log=None)  # type: ignore[arg-type]  # record() never touches the log
    producers.record(7, 1, Stored(0, 10, 3), at=100)
    producers.record(7, 0, Stored(3, 13, 2), at=200)  # an older epoch's: not recorded
    producers.record(7, 1, Stored(0, 10, 3), at=300)  # the same batch again: once
    state = producers.producers[7]
    assert (state.epoch, list(state.recent), state.next_sequence, state.last_time) == (1, [Stored(0, 10, 3)], 3, 100)
    assert producers.known_to == 13
    producers.record(7, 2, Stored(9, 20, 1), at=400)  # a newer epoch starts over
    assert (producers.producers[7].epoch, list(producers.producers[7].recent), producers.known_to) == (
        2, [Stored(9, 20, 1)], 21)


def test_a_rebuild_reads_the_entries_after_the_snapshot_and_says_so(tmp_path, caplog) -> None:
    async def test(kafka) -> None:
        await _partition(kafka)
        for sequence in (0, 2):
            assert (await kafka.produce("t", 0, batch([b"v"] * 2, producer=(8, 0, sequence))))[0] == ErrorCode.none
        log = kafka.apis.topics.log("t", 0)
        kafka.apis.produce.states.snapshot_all()
        snapshot = _saved(log)
        assert snapshot["offset"] == 4
        assert (await kafka.produce("t", 0, batch([b"v"] * 2, producer=(9, 0, 0))))[0] == ErrorCode.none
        await _plain(kafka, 2)
        caplog.set_level(logging.INFO, logger="magnetar.kafka.idempotence")
        fresh = ProducerStates(snapshot_interval=1000)
        assert fresh.check(log, _batch(9, 0)).duplicate_of == 4
        assert [r.getMessage() for r in caplog.records if "rebuilt" in r.getMessage()] == [
            f"{log.name}: Kafka producer state rebuilt from 3 entries past its snapshot (1 batches)"]
        resaved = _saved(log)  # what was read is not read again, and the snapshot's times are kept
        assert resaved["offset"] == 8 and resaved["producers"]["8"] == snapshot["producers"]["8"]
        caplog.clear()
        ProducerStates(snapshot_interval=1000).check(log, _batch(9, 2))
        assert not [r for r in caplog.records if "rebuilt" in r.getMessage()]  # nothing past the snapshot now

    run_in_process(tmp_path, test)


def test_a_snapshot_that_cannot_be_written_is_logged(tmp_path, caplog) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka, interval=1)
        states.check(log, _batch(10, 0))
        kafka.apis.topics.delete("t")
        caplog.set_level(logging.INFO, logger="magnetar.kafka.idempotence")
        states.stored(log, _batch(10, 0), 0)
        (message,) = [r.getMessage() for r in caplog.records if "not snapshotted" in r.getMessage()]
        assert message.startswith(f"{log.name}: Kafka producer state not snapshotted: ") and "closed" in message

    run_in_process(tmp_path, test)
