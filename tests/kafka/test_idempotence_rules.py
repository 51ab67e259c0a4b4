"""Idempotent produce's rules, on real partitions of an in-process broker (kafka/idempotence.py).

Kafka's verdicts on a batch by its producer id, epoch and base sequence; what a stored batch,
a forgotten one and a newer epoch change; sequence wrap-around; snapshots every interval (or
64 MB) and at a clean stop, expiry of silent producers, and the state rebuilt by a fresh
ProducerStates from the snapshot and the entries after it.
"""

from __future__ import annotations

import json
import time

import pytest
from kafka_brokers import batch
from kafka_in_process import run_in_process
from kio.schema.errors import ErrorCode

from magnetar.kafka import idempotence
from magnetar.kafka.idempotence import ACCEPT, ProducerIds, ProducerStates, SequenceCheck
from magnetar.kafka.producer_snapshots import SNAPSHOT_PROPERTY
from magnetar.kafka.protocol.records import split_batches

MAX_SEQUENCE = (1 << 31) - 1


def _batch(producer_id: int, sequence: int, count: int = 2, epoch: int = 0):
    (produced,) = split_batches(batch([b"v"] * count, producer=(producer_id, epoch, sequence)))
    return produced


async def _partition(kafka, name: str = "t"):
    kafka.apis.topics.create(name, 1)
    return kafka.apis.topics.log(name, 0)


async def _fresh(kafka, interval: int = 1000):
    """A new partition and producer states that snapshot every `interval` batches."""
    return await _partition(kafka), ProducerStates(snapshot_interval=interval)


def test_verdicts_follow_the_expected_sequence(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        assert states.check(log, _batch(-1, -1)) is ACCEPT
        assert states.check(log, _batch(1, 10)) is ACCEPT  # a new producer starts anywhere
        assert states.check(log, _batch(1, 12)) is ACCEPT
        # its first try still being written: retriable (not OUT_OF_ORDER, fatal to librdkafka)
        assert states.check(log, _batch(1, 12)) == SequenceCheck(ErrorCode.not_enough_replicas)
        states.stored(log, _batch(1, 10), 0)
        states.stored(log, _batch(1, 12), 2)
        assert states.check(log, _batch(1, 10)) == SequenceCheck(ErrorCode.none, 0)  # a retry
        assert states.check(log, _batch(1, 12)) == SequenceCheck(ErrorCode.none, 2)
        assert states.check(log, _batch(1, 15)) == SequenceCheck(ErrorCode.out_of_order_sequence_number)
        assert states.check(log, _batch(1, 8)) == SequenceCheck(ErrorCode.duplicate_sequence_number)
        assert states.check(log, _batch(1, 14, epoch=-1)) == SequenceCheck(ErrorCode.invalid_producer_epoch)
        assert states.check(log, _batch(1, 14)) is ACCEPT

    run_in_process(tmp_path, test)


def test_only_the_last_five_batches_are_answered_as_retries(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        for n in range(7):
            assert states.check(log, _batch(3, 2 * n)) is ACCEPT
            states.stored(log, _batch(3, 2 * n), 2 * n)
        assert [states.check(log, _batch(3, 2 * n)).duplicate_of for n in range(2, 7)] == [4, 6, 8, 10, 12]
        assert states.check(log, _batch(3, 2)) == SequenceCheck(ErrorCode.duplicate_sequence_number)

    run_in_process(tmp_path, test)


def test_a_newer_epoch_starts_over_and_the_older_ones_batches_are_not_recorded(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        old = _batch(4, 0)
        assert states.check(log, old) is ACCEPT
        assert states.check(log, _batch(4, 50, epoch=1)) is ACCEPT  # fenced: the new epoch starts anywhere
        states.stored(log, old, 0)  # the old epoch's batch lands after the new epoch took over
        assert states.check(log, old) == SequenceCheck(ErrorCode.invalid_producer_epoch)
        assert states.check(log, _batch(4, 52, epoch=1)) is ACCEPT

    run_in_process(tmp_path, test)


def test_sequences_wrap_around_at_two_to_the_31(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        assert states.check(log, _batch(5, MAX_SEQUENCE - 1)) is ACCEPT
        assert states.check(log, _batch(5, 0)) is ACCEPT
        assert states.check(log, _batch(5, 2)) is ACCEPT

    run_in_process(tmp_path, test)


def test_forgotten_batches_free_their_sequences_from_the_first_one(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        batches = [_batch(6, 0), _batch(6, 2), _batch(-1, -1)]
        assert all(states.check(log, b) is ACCEPT for b in batches)
        states.forget(log, batches)
        assert states.check(log, _batch(6, 2)) == SequenceCheck(ErrorCode.out_of_order_sequence_number)
        assert states.check(log, _batch(6, 0)) is ACCEPT
        assert states.check(log, _batch(7, 0, epoch=3)) is ACCEPT
        states.check(log, _batch(7, 0, epoch=4))
        states.forget(log, [_batch(7, 2, epoch=3)])  # an older epoch's: nothing to free
        assert states.check(log, _batch(7, 2, epoch=4)) is ACCEPT
        states.forget(await _partition(kafka, "other"), [_batch(6, 0)])  # a partition never checked: nothing

    run_in_process(tmp_path, test)


def test_a_snapshot_is_taken_every_interval_batches_or_64_mb(tmp_path, monkeypatch) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka, 3)
        for n in range(3):
            assert log.property(SNAPSHOT_PROPERTY) is None or n == 0
            states.check(log, _batch(8, 2 * n))
            states.stored(log, _batch(8, 2 * n), 2 * n)
        saved = json.loads(log.property(SNAPSHOT_PROPERTY))
        assert saved["offset"] == 6 and saved["producers"]["8"][2] == [[0, 0, 2], [2, 2, 2], [4, 4, 2]]
        monkeypatch.setattr(idempotence, "_SNAPSHOT_BYTES", 1)
        states.check(log, _batch(8, 6))
        states.stored(log, _batch(8, 6), 6)
        assert json.loads(log.property(SNAPSHOT_PROPERTY))["offset"] == 8

    run_in_process(tmp_path, test)


def test_a_clean_stop_snapshots_what_changed_and_forgets_producers_silent_for_a_day(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka)
        for producer_id in (9, 10):
            states.check(log, _batch(producer_id, 0))
            states.stored(log, _batch(producer_id, 0), 2 * (producer_id - 9))
        silent = states._partitions[log.name].producers[9]
        silent.last_time = int(time.time() * 1000) - idempotence.EXPIRATION_MS - 1
        states.snapshot_all()
        saved = json.loads(log.property(SNAPSHOT_PROPERTY))
        assert list(saved["producers"]) == ["10"] and saved["offset"] == 4
        log.set_property(SNAPSHOT_PROPERTY, "unchanged")
        states.snapshot_all()  # nothing new: not written again
        assert log.property(SNAPSHOT_PROPERTY) == "unchanged"

    run_in_process(tmp_path, test)


@pytest.mark.parametrize("entry_format", ["pulsar", "kafka"])
def test_a_fresh_state_is_rebuilt_from_the_snapshot_and_the_entries_after_it(tmp_path, entry_format) -> None:
    async def test(kafka) -> None:
        await _partition(kafka)
        for sequence in range(0, 10, 2):  # snapshots after the 2nd and 4th batch; the 5th only in the log
            assert (await kafka.produce("t", 0, batch([b"v"] * 2, producer=(11, 0, sequence))))[0] == ErrorCode.none
        assert (await kafka.produce("t", 0, batch([b"plain"])))[0] == ErrorCode.none  # another producer's entry
        log = kafka.apis.topics.log("t", 0)
        assert json.loads(log.property(SNAPSHOT_PROPERTY))["offset"] == 8
        fresh = ProducerStates(snapshot_interval=1000)
        assert [fresh.check(log, _batch(11, s)).duplicate_of for s in (2, 4, 6, 8)] == [2, 4, 6, 8]
        assert fresh.check(log, _batch(11, 10)) is ACCEPT
        assert json.loads(log.property(SNAPSHOT_PROPERTY))["offset"] == 11  # what was read is not read again
        log.set_property(SNAPSHOT_PROPERTY, "{not json")
        rebuilt = ProducerStates(snapshot_interval=1000)  # an unreadable snapshot: the whole log
        assert [rebuilt.check(log, _batch(11, s)).duplicate_of for s in (0, 8)] == [0, 8]

    run_in_process(tmp_path, test, entryFormat=entry_format, brokerDeduplicationEntriesInterval=2)


def test_a_snapshot_of_a_deleted_partition_is_skipped(tmp_path) -> None:
    async def test(kafka) -> None:
        log, states = await _fresh(kafka, 1)
        states.check(log, _batch(12, 0))
        kafka.apis.topics.delete("t")
        states.stored(log, _batch(12, 0), 0)  # the snapshot fails quietly: the topic is gone
        states.snapshot_all()

    run_in_process(tmp_path, test)


def test_producer_ids_come_from_reserved_blocks_of_a_thousand() -> None:
    blocks: list[int] = []

    def reserve(count: int) -> range:
        blocks.append(count)
        return range(5000 * len(blocks), 5000 * len(blocks) + count)

    ids = ProducerIds(reserve)
    allocated = [ids.allocate() for _ in range(1001)]
    assert allocated[:2] == [5000, 5001] and allocated[999] == 5999 and allocated[1000] == 10000
    assert blocks == [1000, 1000]
