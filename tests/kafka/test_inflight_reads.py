"""What Kafka readers see while a write is in flight (issue 41 item 1), through KafkaApis in process.

Kafka's rule: the log start and the high watermark are offsets of durable data. A message is
numbered (PIP-70) when its write starts; until it is durable and acknowledged no Fetch or
ListOffsets may count it, or a consumer that starts before the producer is told offsets that
hold nothing yet and skips what lands below them.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka_brokers import batch
from kafka_in_process import EARLIEST, LATEST, held_writes, run_in_process
from kio.schema.errors import ErrorCode
from polling import wait_for

FORMATS = ["pulsar", "kafka"]


def _values(partition) -> list[bytes]:
    records = bytes(partition.records or b"")
    values = []
    while records:
        size = int.from_bytes(records[8:12], "big") + 12
        values += [record.value for record in DefaultRecordBatch(bytearray(records[:size]))]
        records = records[size:]
    return values


async def _readers_see(kafka, topic: str, partitions: list[int], end: int) -> None:
    """Every reader's answer on `partitions` is that of a log holding offsets [0, end)."""
    fetched = await kafka.fetch(topic, dict.fromkeys(partitions, 0))
    for partition in partitions:
        answer = fetched[partition]
        assert (answer.error_code, answer.high_watermark, answer.log_start_offset) == (ErrorCode.none, end, 0)
        assert len(_values(answer)) == end
    for timestamp, offset in ((EARLIEST, 0), (LATEST, end)):
        listed = kafka.list_offsets(topic, partitions, timestamp)
        assert {p: (a.error_code, a.offset) for p, a in listed.items()} == dict.fromkeys(
            partitions, (ErrorCode.none, offset))


@pytest.mark.parametrize("entry_format", FORMATS)
def test_an_empty_partition_being_written_reads_as_empty_until_the_write_is_acknowledged(tmp_path,
                                                                                          entry_format) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 2)
        await _readers_see(kafka, "t", [0, 1], 0)
        with held_writes(kafka.service) as release:
            stored = kafka.produce("t", 0, batch([b"a", b"b", b"c"]))
            await asyncio.sleep(0)  # the loop turns: nothing is durable yet
            assert not stored.done()
            await _readers_see(kafka, "t", [0, 1], 0)
            release.set()
            # durable in the ledger, its acknowledgement not yet run on this loop (nothing awaited)
            log = kafka.apis.topics.log("t", 0)
            ledger = kafka.service.topics[log.name].ledger
            assert wait_for(lambda: ledger.last_confirmed_position is not None, timeout=30)
            await _readers_see(kafka, "t", [0, 1], 0)
        assert await stored == (ErrorCode.none, 0)
        await _readers_see(kafka, "t", [0], 3)
        await _readers_see(kafka, "t", [1], 0)

    run_in_process(tmp_path, test, entryFormat=entry_format)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_a_partition_with_records_reads_to_its_acknowledged_end_while_more_are_written(tmp_path,
                                                                                       entry_format) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 1)
        assert await kafka.produce("t", 0, batch([b"a", b"b"])) == (ErrorCode.none, 0)
        ledger = kafka.service.topics[kafka.apis.topics.log("t", 0).name].ledger
        written = ledger.last_confirmed_position
        with held_writes(kafka.service) as release:
            stored = kafka.produce("t", 0, batch([b"c"] * 5))
            await asyncio.sleep(0)
            for _ in range(2):  # in flight; then durable, its acknowledgement not yet run on this loop
                await _readers_see(kafka, "t", [0], 2)
                at_end = (await kafka.fetch("t", {0: 2}))[0]
                assert (at_end.error_code, at_end.high_watermark, at_end.records) == (ErrorCode.none, 2, b"")
                past_end = (await kafka.fetch("t", {0: 3}))[0]
                assert past_end.error_code == ErrorCode.offset_out_of_range
                release.set()
                assert wait_for(lambda: ledger.last_confirmed_position != written, timeout=30)
        assert await stored == (ErrorCode.none, 2)
        await _readers_see(kafka, "t", [0], 7)

    run_in_process(tmp_path, test, entryFormat=entry_format)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_a_long_poll_on_empty_partitions_wakes_with_no_error_and_only_acknowledged_records(tmp_path,
                                                                                         entry_format) -> None:
    """A fetch at 0 waiting on two empty partitions while the first write to each is in flight: the
    first acknowledged append wakes it, and the other partition, maybe durable but not yet
    acknowledged, answers empty at 0 (OFFSET_OUT_OF_RANGE there made clients skip to its end)."""
    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 2)
        polling = asyncio.ensure_future(kafka.fetch("t", {0: 0, 1: 0}, max_wait=30))
        with held_writes(kafka.service):
            stored = [kafka.produce("t", p, batch([b"x"] * (p + 1))) for p in (0, 1)]
            await asyncio.sleep(0)
            assert not polling.done()
        answers = await polling
        for answer in answers.values():
            assert (answer.error_code, answer.log_start_offset) == (ErrorCode.none, 0)
            assert len(_values(answer)) == answer.high_watermark
        assert await asyncio.gather(*stored) == [(ErrorCode.none, 0)] * 2
        await _readers_see(kafka, "t", [0], 1)
        await _readers_see(kafka, "t", [1], 2)

    run_in_process(tmp_path, test, entryFormat=entry_format)

