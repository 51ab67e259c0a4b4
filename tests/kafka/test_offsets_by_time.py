"""Issue 41 item 3: ListOffsets by time finds records by their own CreateTime and answers with the
record's offset and timestamp, as Kafka does (records sent with 2020 timestamps were found by when
the broker stored them, and the answer echoed the asked time)."""

from __future__ import annotations

import time

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_in_process import run_in_process
from kio.schema.errors import ErrorCode

from magnetar.kafka.offsets_by_time import NOT_FOUND
from magnetar.kafka.topic_settings import KAFKA_CONFIGS

JAN_2020 = 1_577_836_800_000
FORMATS = ["pulsar", "kafka"]


def _batch(timestamps: list[int], codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, timestamp in enumerate(timestamps):
        builder.append(offset, timestamp=timestamp, key=None, value=b"v%d" % timestamp, headers=[])
    return bytes(builder.build())


@pytest.mark.parametrize("entry_format", FORMATS)
def test_a_time_finds_the_first_record_at_or_after_it_by_create_time(tmp_path, entry_format) -> None:
    """Three batches of 2020 records (offsets 0-3, 4-6, 7-8), one gzip-compressed."""
    batches = [[JAN_2020 + 10 * i for i in range(4)], [JAN_2020 + 100 + 10 * i for i in range(3)],
               [JAN_2020 + 500, JAN_2020 + 900]]

    async def test(kafka) -> None:
        kafka.apis.topics.create("t", 1)
        for number, timestamps in enumerate(batches):
            assert (await kafka.produce("t", 0, _batch(timestamps, codec=number % 2)))[0] == ErrorCode.none
        asked = {JAN_2020 - 1: (0, JAN_2020), JAN_2020: (0, JAN_2020), JAN_2020 + 11: (2, JAN_2020 + 20),
                 JAN_2020 + 30: (3, JAN_2020 + 30), JAN_2020 + 31: (4, JAN_2020 + 100),
                 JAN_2020 + 105: (5, JAN_2020 + 110), JAN_2020 + 125: (7, JAN_2020 + 500),
                 JAN_2020 + 501: (8, JAN_2020 + 900), JAN_2020 + 901: NOT_FOUND, 2**62: NOT_FOUND}
        for timestamp, (offset, found) in asked.items():
            (answer,) = kafka.list_offsets("t", [0], timestamp).values()
            assert (answer.error_code, answer.offset, answer.timestamp) == (ErrorCode.none, offset, found), \
                timestamp

    run_in_process(tmp_path, test, entryFormat=entry_format)


def test_a_log_append_time_topic_is_searched_by_the_brokers_time(tmp_path) -> None:
    """With message.timestamp.type=LogAppendTime the records' own times do not count: the broker's do."""
    async def test(kafka) -> None:
        kafka.apis.topics.create("appended", 1)
        kafka.apis.topics.broker.set_policy(kafka.apis.topics.pulsar_name("appended"), KAFKA_CONFIGS,
                                            {"message.timestamp.type": "LogAppendTime"})
        started = int(time.time() * 1000)
        for timestamps in ([JAN_2020, JAN_2020 + 1], [JAN_2020 + 2]):
            assert (await kafka.produce("appended", 0, _batch(timestamps)))[0] == ErrorCode.none
        (first,) = kafka.list_offsets("appended", [0], JAN_2020 + 1).values()
        assert first.offset == 0 and first.timestamp >= started
        (later,) = kafka.list_offsets("appended", [0], first.timestamp + 1).values()
        found = (later.offset, later.timestamp)
        assert found == NOT_FOUND or (later.offset == 2 and later.timestamp > first.timestamp), found

    run_in_process(tmp_path, test)
