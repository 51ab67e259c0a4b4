"""Produce through KafkaApis in process: what each request is answered, and what each batch is stored as.

Errors per partition (unknown partition, no records, a bad CRC, a batch over maxMessageSize, a
refused role), requests over several topics and partitions, acks=0, and the entries written in
each entry format: producer names and sequences, the Kafka-format properties, the converted
batch's codec, sizes and event time.
"""

from __future__ import annotations

import asyncio
import datetime
import errno
import gc
import time

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_brokers import batch
from kafka_in_process import run_in_process
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce

from magnetar.broker.topics.persistent.persistent_topic import TERMINATED_PROPERTY
from magnetar.kafka.apis import NO_RESPONSE
from magnetar.kafka.idempotence import ACCEPT
from magnetar.kafka.producer_snapshots import producer_name
from magnetar.kafka.protocol.messages import Request, decode_response, encode_response
from magnetar.kafka.protocol.records import split_batches
from magnetar.storage import Position
from magnetar.storage.ledger import Ledger
from magnetar.wire.batch import decode_messages
from magnetar.wire.entry import parse_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

FORMATS = ["pulsar", "kafka"]
TIMESTAMP = 1_700_000_000_000


def _request(parts: dict[tuple[str, int], bytes | None], acks: int = -1) -> produce.ProduceRequest:
    topics: dict[str, list[produce.PartitionProduceData]] = {}
    for (topic, partition), records in parts.items():
        topics.setdefault(topic, []).append(produce.PartitionProduceData(index=partition, records=records))
    return produce.ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=10), transactional_id=None,
                                  topic_data=tuple(produce.TopicProduceData(name=name, partition_data=tuple(data))
                                                   for name, data in topics.items()))


def _answers(response) -> dict[tuple[str, int], tuple[ErrorCode, int, str | None]]:
    return {(topic.name, part.index): (part.error_code, part.base_offset, part.error_message)
            for topic in response.responses for part in topic.partition_responses}


def _entries(kafka, topic: str, partition: int = 0) -> list:
    ledger = kafka.service.topics[kafka.apis.topics.log(topic, partition).name].ledger
    first = ledger.first_position or Position(0, 0)
    return [parse_entry(entry) for _, entry in ledger.read_entries(first, 100)]


def _compressed(values: list[bytes], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=TIMESTAMP + offset, key=None, value=value, headers=[])
    return bytes(builder.build())


def test_each_partition_of_a_request_gets_its_own_answer(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 2)
        kafka.apis.topics.create("b", 1)
        corrupt = bytearray(batch([b"x"]))
        corrupt[-1] ^= 1
        response = await kafka.call(0, 9, _request({
            ("a", 0): batch([b"1", b"2"]), ("a", 1): batch([b"3"]), ("b", 0): b"", ("a", 7): batch([b"4"]),
            ("missing", 0): batch([b"5"]), ("b", 1): bytes(corrupt)}))
        answers = _answers(response)
        assert answers[("a", 0)] == (ErrorCode.none, 0, None)
        assert answers[("a", 1)] == (ErrorCode.none, 0, None)
        assert answers[("b", 0)] == (ErrorCode.invalid_record, -1, "no records")
        assert answers[("a", 7)][:2] == answers[("missing", 0)][:2] == (ErrorCode.unknown_topic_or_partition, -1)
        assert answers[("b", 1)][:2] == (ErrorCode.unknown_topic_or_partition, -1)
        assert [t.name for t in response.responses] == ["a", "b", "missing"]
        assert (response.throttle_time, [p.log_start_offset for t in response.responses
                                         for p in t.partition_responses]) == (datetime.timedelta(0), [-1] * 6)
        response = await kafka.call(0, 9, _request({("b", 0): bytes(corrupt)}))
        assert _answers(response)[("b", 0)][:2] == (ErrorCode.corrupt_message, -1)
        large = await kafka.call(0, 9, _request({("a", 0): batch([b"y" * 3000])}))
        error, offset, message = _answers(large)[("a", 0)]
        assert (error, offset) == (ErrorCode.message_too_large, -1) and "over maxMessageSize=2000" in message
        assert _answers(await kafka.call(0, 9, _request({("a", 0): batch([b"z"])})))[("a", 0)][:2] == (
            ErrorCode.none, 2)  # nothing of the refused ones was stored

    run_in_process(tmp_path, test, maxMessageSize=2000)


def test_the_base_offsets_of_a_request_are_each_partitions_own(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 3)
        for round_ in range(3):
            response = await kafka.call(0, 9, _request({("a", p): batch([b"v"] * (p + 1)) for p in range(3)}))
            assert _answers(response) == {("a", p): (ErrorCode.none, round_ * (p + 1), None) for p in range(3)}

    run_in_process(tmp_path, test)


def test_acks_zero_gets_no_response_and_is_stored(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        answer = kafka.apis.handle(kafka.request(0, 9, _request({("a", 0): batch([b"v"])}, acks=0)), kafka.access)
        assert answer is NO_RESPONSE
        deadline = time.monotonic() + 30
        while kafka.apis.topics.log("a", 0).end_offset() < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert kafka.apis.topics.log("a", 0).end_offset() == 1

    run_in_process(tmp_path, test)


def test_a_refused_role_gets_topic_authorization_failed(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        error, offset, message = _answers(await kafka.call(0, 9, _request({("a", 0): batch([b"v"])})))[("a", 0)]
        assert (error, offset) == (ErrorCode.topic_authorization_failed, -1) and message

    run_in_process(tmp_path, test, authorizationEnabled=True, authenticationEnabled=True)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_entries_carry_the_producer_and_its_sequence(tmp_path, entry_format) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        before = int(time.time() * 1000)
        for values in ([b"1", b"2"], [b"3"]):
            request = kafka.request(0, 9, _request({("a", 0): batch(values)}))
            await kafka.apis.handle(request._replace(client_id="app"), kafka.access)
        assert await kafka.produce("a", 0, batch([b"4", b"5"], producer=(7, 2, 40))) == (ErrorCode.none, 3)
        entries = _entries(kafka, "a")
        assert [(e.metadata.producer_name, e.metadata.sequence_id, e.metadata.num_messages_in_batch)
                for e in entries] == [("kafka-app", 0, 2), ("kafka-app", 2, 1), (producer_name(7, 2), 40, 2)]
        assert all(before <= e.metadata.publish_time <= int(time.time() * 1000) for e in entries)
        properties = [{p.key: p.value for p in e.metadata.properties} for e in entries]
        if entry_format == "kafka":
            assert all(p.get("entry.format") == "kafka" for p in properties)
            assert not any(e.metadata.HasField("event_time") for e in entries)
        else:
            assert properties == [{}, {}, {}]
            assert [e.metadata.event_time for e in entries] == [TIMESTAMP] * 3

    run_in_process(tmp_path, test, entryFormat=entry_format)


def test_a_compressed_batch_is_converted_with_its_codec_and_sizes(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        for codec in (0, 1):  # none, gzip
            assert (await kafka.produce("a", 0, _compressed([b"v" * 100] * 5, codec)))[0] == ErrorCode.none
        plain, gzipped = _entries(kafka, "a")
        assert not plain.metadata.HasField("compression") and not plain.metadata.HasField("uncompressed_size")
        assert gzipped.metadata.compression == pb.ZLIB
        assert gzipped.metadata.uncompressed_size == len(plain.payload) > len(gzipped.payload)
        assert gzipped.metadata.event_time == TIMESTAMP + 4

    run_in_process(tmp_path, test)


def test_a_retried_idempotent_batch_is_answered_with_its_offset_and_stored_once(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        first = batch([b"1", b"2"], producer=(5, 0, 0))
        assert await kafka.produce("a", 0, first) == (ErrorCode.none, 0)
        assert await kafka.produce("a", 0, first) == (ErrorCode.none, 0)
        assert await kafka.produce("a", 0, batch([b"x"], producer=(5, 0, 9))) == (
            ErrorCode.out_of_order_sequence_number, -1)
        # an accepted batch beside a refused one: nothing stored, its sequence free again
        both = batch([b"3"], producer=(5, 0, 2)) + batch([b"y"], producer=(5, 0, 9))
        assert await kafka.produce("a", 0, both) == (ErrorCode.out_of_order_sequence_number, -1)
        assert await kafka.produce("a", 0, batch([b"3"], producer=(5, 0, 2))) == (ErrorCode.none, 2)
        assert kafka.apis.topics.log("a", 0).end_offset() == 3

    run_in_process(tmp_path, test)


def _stamped(timestamp: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    builder.append(0, timestamp=timestamp, key=None, value=b"v", headers=[])
    return bytes(builder.build())


def test_what_each_entry_is_stored_with(tmp_path) -> None:
    """No Pulsar checksum (the batch's CRC was checked); plain producers numbered by message, a
    client without an id named `kafka-client`; producer id 0 named as any idempotent producer;
    the event time only from a positive timestamp."""
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        for values in ([b"1", b"2"], [b"3"], [b"4"]):
            await kafka.apis.handle(kafka.request(0, 9, _request({("a", 0): batch(values)}))._replace(client_id=None),
                                    kafka.access)
        assert await kafka.produce("a", 0, batch([b"5"], producer=(0, 1, 0))) == (ErrorCode.none, 4)
        for timestamp in (0, 1):
            assert (await kafka.produce("a", 0, _stamped(timestamp)))[0] == ErrorCode.none
        entries = _entries(kafka, "a")
        assert [(e.metadata.producer_name, e.metadata.sequence_id) for e in entries[:4]] == [
            ("kafka-client", 0), ("kafka-client", 2), ("kafka-client", 3), (producer_name(0, 1), 0)]
        assert all(e.checksum is None for e in entries)
        assert [e.metadata.HasField("event_time") for e in entries[-2:]] == [False, True]
        assert entries[-1].metadata.event_time == 1

    run_in_process(tmp_path, test)


def test_a_kafka_format_entry_has_no_pulsar_checksum(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        assert (await kafka.produce("a", 0, batch([b"v"])))[0] == ErrorCode.none
        (entry,) = _entries(kafka, "a")
        assert entry.checksum is None

    run_in_process(tmp_path, test, entryFormat="kafka")


def test_a_batch_of_exactly_max_message_size_is_taken(tmp_path) -> None:
    exact = batch([b"v" * 100])

    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        assert (await kafka.produce("a", 0, exact))[0] == ErrorCode.none
        assert (await kafka.produce("a", 0, batch([b"v" * 101])))[0] == ErrorCode.message_too_large

    run_in_process(tmp_path, test, maxMessageSize=len(exact))


def test_a_fully_stored_request_is_answered_from_the_encoded_template(tmp_path) -> None:
    """The cheap path (an encoded response with the offsets written in) whenever nothing failed."""
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 2)
        stored = await kafka.apis.handle(kafka.request(0, 9, _request({("a", 0): batch([b"v"]),
                                                                       ("a", 1): batch([b"w"])})), kafka.access)
        mixed = _request({("a", 0): batch([b"v"]), ("a", 5): batch([b"w"])})
        failed = await kafka.apis.handle(kafka.request(0, 9, mixed), kafka.access)
        assert isinstance(stored, bytes) and not isinstance(failed, bytes)
        response = await kafka.call(0, 9, _request({("a", 5): batch([b"w"])}))
        (part,) = response.responses[0].partition_responses
        assert (part.log_start_offset, part.record_errors, response.throttle_time) == (-1, (), datetime.timedelta(0))
        assert part.log_append_time is None or part.log_append_time.timestamp() < 0

    run_in_process(tmp_path, test)


def test_several_idempotent_batches_of_one_partition_are_each_remembered_at_their_offset(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        first, second = batch([b"1", b"2"], producer=(1, 0, 0)), batch([b"3", b"4", b"5"], producer=(1, 0, 2))
        assert await kafka.produce("a", 0, first + second) == (ErrorCode.none, 0)
        assert await kafka.produce("a", 0, second) == (ErrorCode.none, 2)  # a retry of the second alone
        assert await kafka.produce("a", 0, first) == (ErrorCode.none, 0)

    run_in_process(tmp_path, test)


def test_a_terminated_topic_refuses_and_the_batch_may_come_again(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        ledger = kafka.service.topics[kafka.apis.topics.log("a", 0).name].ledger
        ledger.set_property(TERMINATED_PROPERTY, "true")
        error, offset, message = _answers(await kafka.call(0, 9, _request({("a", 0): batch([b"v"], producer=(2, 0, 0))})
                                                           ))[("a", 0)]
        assert (error, offset) == (ErrorCode.policy_violation, -1) and "terminated" in message
        ledger.remove_property(TERMINATED_PROPERTY)
        assert await kafka.produce("a", 0, batch([b"v"], producer=(2, 0, 0))) == (ErrorCode.none, 0)

    run_in_process(tmp_path, test)


def test_a_refusal_names_the_role_and_the_topic(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        _, _, message = _answers(await kafka.call(0, 9, _request({("a", 0): batch([b"v"])})))[("a", 0)]
        assert "persistent://public/default/a" in message

    run_in_process(tmp_path, test, authorizationEnabled=True, authenticationEnabled=True)



def test_a_write_the_disk_fails_answers_kafka_storage_error_and_frees_the_sequence(tmp_path, monkeypatch,
                                                                                   caplog) -> None:
    """The ledger's write fails (an I/O error, injected): KAFKA_STORAGE_ERROR with the reason, one
    warning, the idempotent batch's sequence free again; the topic then pauses before loading
    again with a new ledger (topics.failed_writes), answered KAFKA_STORAGE_ERROR too, which
    Kafka producers retry (it had escaped as an exception, closing the connection)."""
    def failing(self, entries, *, sync) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        log = kafka.apis.topics.log("a", 0)
        monkeypatch.setattr(Ledger, "append", failing)
        retried = _request({("a", 0): batch([b"v"], producer=(4, 0, 0))})
        error, offset, message = _answers(await kafka.call(0, 9, retried))[("a", 0)]
        assert (error, offset) == (ErrorCode.kafka_storage_error, -1) and "injected I/O error" in message
        (warning,) = [r.getMessage() for r in caplog.records if "Kafka produce to" in r.getMessage()]
        assert warning == f"Kafka produce to a-0 failed: {message}"
        assert kafka.apis.produce.states.check(log, split_batches(batch([b"v"], producer=(4, 0, 0)))[0]) is ACCEPT
        kafka.apis.produce.states.forget(log, split_batches(batch([b"v"], producer=(4, 0, 0))))
        error, offset, message = _answers(await kafka.call(0, 9, retried))[("a", 0)]
        assert (error, offset) == (ErrorCode.kafka_storage_error, -1) and "recovering from a failed write" in message

    run_in_process(tmp_path, test)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_a_group_joins_plain_batches_into_one_entry_and_keeps_the_others_apart(tmp_path, entry_format) -> None:
    """Requests taken together (produce_many): in the Pulsar format consecutive batches join one
    Pulsar batch unless their codec, producer or idempotence differs, or together they pass
    half of maxMessageSize; in the Kafka format every batch stays an entry. Each request's answer is the
    offset of its own first record either way."""
    big = b"x" * 800  # a batch of it and one of "h" fit in half of maxMessageSize, two of it do not
    sent = [("app", batch([b"a", b"b"])), ("app", batch([b"c"])), ("app", _compressed([b"d" * 500], 1)),
            ("app", batch([b"e"])), ("app", batch([b"f"], producer=(7, 0, 0))),
            ("app", batch([b"f2"], producer=(7, 0, 1))), ("app", batch([b"g"])),
            ("other", batch([b"h"])), ("other", batch([big])), ("other", batch([big]))]
    joined = [[b"a", b"b", b"c"], [b"d" * 500], [b"e"], [b"f"], [b"f2"], [b"g"], [b"h", big], [big]]

    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 1)
        requests = [kafka.request(0, 9, _request({("a", 0): records}))._replace(client_id=client)
                    for client, records in sent]
        answers = [_answers(decode) for decode in await asyncio.gather(*(
            _decoded(kafka, answer) for answer in kafka.apis.produce.produce_many(requests, kafka.access)))]
        assert [answer[("a", 0)][:2] for answer in answers] == [
            (ErrorCode.none, offset) for offset in (0, 2, 3, 4, 5, 6, 7, 8, 9, 10)]
        entries = _entries(kafka, "a")
        if entry_format == "kafka":
            assert [e.metadata.num_messages_in_batch for e in entries] == [2, 1, 1, 1, 1, 1, 1, 1, 1, 1]
            return
        assert [[bytes(m.value) for m in decode_messages(e.metadata, e.payload, max_size=1 << 20)]
                for e in entries] == joined
        assert [(e.metadata.producer_name, e.metadata.sequence_id) for e in entries] == [
            ("kafka-app", 0), ("kafka-app", 3), ("kafka-app", 4), (producer_name(7, 0), 0), (producer_name(7, 0), 1),
            ("kafka-app", 5),
            ("kafka-other", 6), ("kafka-other", 8)]

    run_in_process(tmp_path, test, entryFormat=entry_format, maxMessageSize=2000)


async def _decoded(kafka, answer) -> object:
    """A produce answer (a future of encoded bytes) as a client reads it."""
    body = await answer
    return decode_response(encode_response(0, 9, 0, body)[4:], 0, 9)[1]


def test_answered_produce_requests_leave_nothing_for_the_collector(tmp_path) -> None:
    """A request, its records and its answer die by their reference counts once it is answered:
    a cycle among them kept each alive until a collection, and at 10,000 requests a second
    those collections stalled the loop for tens of milliseconds (the kafka-group slice's tail)."""
    async def test(kafka) -> None:
        kafka.apis.topics.create("a", 2)
        parts = {("a", 0): batch([b"x"]), ("a", 1): batch([b"y"]), ("a", 9): batch([b"z"])}  # one refused
        requests = [kafka.request(0, 9, _request(parts, acks=acks)) for acks in (-1, 1, 0, -1)]
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            answers = kafka.apis.produce.produce_many(requests, kafka.access)
            assert answers[2] is NO_RESPONSE
            for answer in (answers[0], answers[1], answers[3]):
                assert _answers(await _decoded(kafka, answer))[("a", 1)][0] == ErrorCode.none
            del answers, requests
            gc.collect()
            left = [type(thing).__name__ for thing in gc.garbage if isinstance(thing, Request | asyncio.Future)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        assert left == []

    run_in_process(tmp_path, test)
