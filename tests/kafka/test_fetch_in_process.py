"""Fetch and ListOffsets through KafkaApis in process: byte budgets, repeats, errors and the long poll.

Kafka's rules for a Fetch: max_bytes bounds the response but the first batch of the first
partition with records is whole whatever its size; partition_max_bytes bounds each partition
the same way; a partition named twice is answered once. The long poll waits for min_bytes up to
max_wait, and returns at once with an error. ListOffsets answers earliest (-2), latest (-1), a
time, and UNSUPPORTED_VERSION for any other negative timestamp.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka_brokers import batch
from kafka_in_process import EARLIEST, LATEST, fetch_request, run_in_process
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v7 import request as list_offsets

from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

FORMATS = ["pulsar", "kafka"]
VALUE = b"x" * 1000


def _batches(records: bytes) -> list[list[tuple[int, bytes]]]:
    """(offset, value) of each record, batch by batch."""
    out = []
    records = bytes(records or b"")
    while records:
        size = int.from_bytes(records[8:12], "big") + 12
        out.append([(r.offset, r.value) for r in DefaultRecordBatch(bytearray(records[:size]))])
        records = records[size:]
    return out


async def _filled(kafka, topic: str, partitions: int, batches: int, per_batch: int = 4) -> int:
    """`batches` batches of `per_batch` 1000-byte records in each partition; one batch's size as served."""
    kafka.apis.topics.create(topic, partitions)
    for partition in range(partitions):
        for _ in range(batches):
            assert (await kafka.produce(topic, partition, batch([VALUE] * per_batch)))[0] == ErrorCode.none
    return len((await kafka.fetch(topic, {0: 0}, partition_max_bytes=1))[0].records)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_max_bytes_bounds_the_response_past_its_first_batch(tmp_path, entry_format) -> None:
    async def test(kafka) -> None:
        one = await _filled(kafka, "t", 3, 5)
        for max_bytes, expected in ((1, [1, 0, 0]), (one, [1, 0, 0]), (2 * one, [2, 0, 0]),
                                    (6 * one, [5, 1, 0]), (11 * one - 1, [5, 5, 0]), (20 * one, [5, 5, 5])):
            answers = await kafka.fetch("t", {0: 0, 1: 0, 2: 0}, max_bytes=max_bytes)
            assert [len(_batches(answers[p].records)) for p in range(3)] == expected, max_bytes
            assert all(answers[p].error_code == ErrorCode.none and answers[p].high_watermark == 20
                       for p in range(3))
        answers = await kafka.fetch("t", {0: 0, 1: 0}, max_bytes=0)  # no budget at all: as much as there is
        assert [len(_batches(answers[p].records)) for p in (0, 1)] == [5, 5]

    run_in_process(tmp_path, test, entryFormat=entry_format)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_partition_max_bytes_bounds_each_partition_and_the_first_batch_is_whole(tmp_path, entry_format) -> None:
    async def test(kafka) -> None:
        one = await _filled(kafka, "t", 2, 3)
        answers = await kafka.fetch("t", {0: 0, 1: 0}, partition_max_bytes=one + 1)
        assert [len(_batches(answers[p].records)) for p in (0, 1)] == [1, 1]
        answers = await kafka.fetch("t", {0: 0, 1: 0}, partition_max_bytes=one - 1)
        assert [len(_batches(answers[p].records)) for p in (0, 1)] == [1, 0]  # only the first is whole
        answers = await kafka.fetch("t", {0: 4, 1: 0}, partition_max_bytes=one - 1)
        assert _batches(answers[0].records)[0][0] == (4, VALUE)  # from the batch holding offset 4
        assert [len(_batches(answers[p].records)) for p in (0, 1)] == [1, 0]

    run_in_process(tmp_path, test, entryFormat=entry_format)


def test_a_partition_named_twice_is_answered_once_in_the_order_asked(tmp_path) -> None:
    async def test(kafka) -> None:
        await _filled(kafka, "t", 3, 1)
        request = fetch_request("t", {2: 0, 0: 0})
        topic = request.topics[0]
        again = dataclasses.replace(topic.partitions[0], fetch_offset=1)
        partitions = (*topic.partitions, *topic.partitions, again)
        request = dataclasses.replace(request, topics=(dataclasses.replace(topic, partitions=partitions), topic))
        response = await kafka.call(1, 12, request)
        assert [(t.topic, [p.partition_index for p in t.partitions]) for t in response.responses] == [
            ("t", [2, 0]), ("t", [])]
        assert [_batches(p.records)[0][0][0] for p in response.responses[0].partitions] == [0, 0]
        assert (response.error_code, response.session_id, response.throttle_time) == (
            ErrorCode.none, 0, datetime.timedelta(0))
        part = response.responses[0].partitions[0]
        assert (part.last_stable_offset, part.log_start_offset, part.aborted_transactions,
                part.preferred_read_replica) == (4, 0, None, -1)

    run_in_process(tmp_path, test)


def test_unknown_partitions_and_offsets_outside_the_log_are_answered_at_once(tmp_path) -> None:
    async def test(kafka) -> None:
        await _filled(kafka, "t", 1, 1)
        started = time.monotonic()
        answers = await kafka.fetch("t", {0: 5, 3: 0}, max_wait=20)
        assert time.monotonic() - started < 15  # the error ends the long poll
        assert (answers[0].error_code, answers[0].high_watermark, answers[0].log_start_offset, answers[0].records
                ) == (ErrorCode.offset_out_of_range, 4, 0, b"")
        assert (answers[3].error_code, answers[3].high_watermark, answers[3].log_start_offset, answers[3].records
                ) == (ErrorCode.unknown_topic_or_partition, -1, -1, b"")
        missing = await kafka.fetch("nothing", {0: 0})
        assert missing[0].error_code == ErrorCode.unknown_topic_or_partition

    run_in_process(tmp_path, test)


def test_a_long_poll_waits_for_min_bytes_until_max_wait(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 1)
        waiting = asyncio.ensure_future(kafka.fetch("t", {0: 0}, max_wait=30))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        assert (await kafka.produce("t", 0, batch([b"v"])))[0] == ErrorCode.none
        answer = (await asyncio.wait_for(waiting, 25))[0]
        assert _batches(answer.records) == [[(0, b"v")]]
        started = time.monotonic()
        answer = (await kafka.fetch("t", {0: 1}, max_wait=0.1))[0]  # nothing comes: answered at max_wait
        assert answer.records == b"" and time.monotonic() - started >= 0.09

    run_in_process(tmp_path, test)


def test_a_topic_deleted_during_a_long_poll_answers_unknown_partition(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 1)
        waiting = asyncio.ensure_future(kafka.fetch("t", {0: 0}, max_wait=0.3))
        await asyncio.sleep(0.05)
        kafka.apis.topics.delete("t")  # its ledger closes under the waiting fetch
        answer = (await waiting)[0]
        assert (answer.error_code, answer.high_watermark, answer.log_start_offset, answer.records) == (
            ErrorCode.unknown_topic_or_partition, -1, -1, b"")

    run_in_process(tmp_path, test)


def test_list_offsets_answers_earliest_latest_and_refuses_other_negative_times(tmp_path) -> None:
    async def test(kafka) -> None:
        await _filled(kafka, "t", 2, 2)
        assert {p: (a.error_code, a.offset, a.timestamp, a.leader_epoch) for p, a in kafka.list_offsets(
            "t", [0, 1], EARLIEST).items()} == {0: (ErrorCode.none, 0, -1, 0), 1: (ErrorCode.none, 0, -1, 0)}
        assert {p: a.offset for p, a in kafka.list_offsets("t", [0, 1], LATEST).items()} == {0: 8, 1: 8}
        assert kafka.list_offsets("t", [0], -3)[0].error_code == ErrorCode.unsupported_version
        assert kafka.list_offsets("t", [5], LATEST)[5].error_code == ErrorCode.unknown_topic_or_partition
        assert kafka.list_offsets("nothing", [0], LATEST)[0].error_code == ErrorCode.unknown_topic_or_partition

    run_in_process(tmp_path, test)


def test_a_refused_role_gets_topic_authorization_failed(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 1)
        assert (await kafka.fetch("t", {0: 0}))[0].error_code == ErrorCode.topic_authorization_failed
        assert kafka.list_offsets("t", [0], LATEST)[0].error_code == ErrorCode.topic_authorization_failed

    run_in_process(tmp_path, test, authorizationEnabled=True, authenticationEnabled=True)


def test_a_pulsar_message_without_event_time_is_served_at_its_publish_time(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 1)
        log = kafka.apis.topics.log("t", 0)
        metadata = pb.MessageMetadata(producer_name="pulsar", sequence_id=0, publish_time=1_600_000_000_123,
                                      partition_key="k")
        stored = asyncio.get_running_loop().create_future()
        log.append([build_entry(metadata, b"value")], [1], lambda offset, exc: stored.set_result((offset, exc)))
        assert await stored == (0, None)
        (record,) = DefaultRecordBatch(bytearray((await kafka.fetch("t", {0: 0}))[0].records))
        assert (record.offset, record.timestamp, record.key, record.value) == (0, 1_600_000_000_123, b"k", b"value")

    run_in_process(tmp_path, test)


def test_the_first_partition_with_records_takes_its_first_batch_whole_after_empty_ones(tmp_path) -> None:
    async def test(kafka) -> None:
        one = await _filled(kafka, "t", 2, 2)
        answers = await kafka.fetch("t", {0: 8, 1: 0}, max_bytes=one // 2)  # partition 0 at its end: nothing
        assert (answers[0].records, len(_batches(answers[1].records))) == (b"", 1)

    run_in_process(tmp_path, test)


def test_a_fetch_is_answered_as_soon_as_min_bytes_are_there(tmp_path) -> None:
    async def test(kafka) -> None:
        one = await _filled(kafka, "t", 1, 1)
        request = dataclasses.replace(fetch_request("t", {0: 0}, max_wait=30), min_bytes=one)
        response = await asyncio.wait_for(kafka.call(1, 12, request), 20)  # exactly min_bytes: no wait
        assert len(response.responses[0].partitions[0].records) == one

    run_in_process(tmp_path, test)


def test_list_offsets_at_time_zero_is_a_lookup_and_names_its_topics(tmp_path) -> None:
    async def test(kafka) -> None:
        await _filled(kafka, "t", 1, 1)
        (answer,) = kafka.list_offsets("t", [0], 0).values()
        assert (answer.error_code, answer.offset, answer.timestamp) == (ErrorCode.none, 0, 1_700_000_000_000)
        request = kafka.request(2, 7, list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
            list_offsets.ListOffsetsTopic(name="t", partitions=(list_offsets.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=LATEST),)),)))
        response = kafka.apis.handle(request, kafka.access)
        assert ([t.name for t in response.topics], response.throttle_time) == (["t"], datetime.timedelta(0))

    run_in_process(tmp_path, test)
