"""A big Produce request is converted a slice of records a loop turn (issue 45: no turn over 5 ms).

In process, on the test's own event loop (so what runs between two slices is countable, not
timed): a request of N records takes at least ceil(N / SLICE_RECORDS) turns, however its
records are cut into batches and partitions; a small one is still taken in the turn it came;
another connection is answered while a big request is being converted; and a connection's
requests after a big one are still stored after it, in order, idempotent or not.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import time

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka_brokers import batch
from kafka_in_process import run_in_process
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init
from kio.schema.produce.v9 import request as produce

from magnetar.formats.kafka_records import SLICE_RECORDS
from magnetar.kafka.connection import Admission, KafkaConnection
from magnetar.kafka.protocol.messages import decode_response, encode_request, encode_response

#: (records per batch, batches per partition, partitions): one big batch; many small batches
#: over partitions, none of them a slice alone; batches of a slice and a bit.
SHAPES = {"one batch": (5 * SLICE_RECORDS + 7, 1, 1), "small batches": (100, 6, 8),
          "slice and a bit": (SLICE_RECORDS + 1, 2, 3)}


def _request(parts: dict[int, list[bytes]], topic: str = "big", acks: int = -1) -> produce.ProduceRequest:
    return produce.ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=10), transactional_id=None,
                                  topic_data=(produce.TopicProduceData(name=topic, partition_data=tuple(
                                      produce.PartitionProduceData(index=index, records=b"".join(batches))
                                      for index, batches in parts.items())),))


def _values(partition: int, batch_index: int, size: int) -> list[bytes]:
    return [b"%d-%d-%d" % (partition, batch_index, i) for i in range(size)]


def _answers(body) -> dict[int, tuple[ErrorCode, int]]:
    response = decode_response(encode_response(0, 9, 0, body)[4:], 0, 9)[1]
    return {part.index: (part.error_code, part.base_offset)
            for topic in response.responses for part in topic.partition_responses}


async def _stored_values(kafka, partition: int, count: int) -> list[bytes]:
    """The first `count` values of the partition, as a Kafka consumer reads them (waiting, with a
    deadline, for those not durable yet)."""
    found: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(found) < count:
        (data,) = (await kafka.fetch("big", {partition: len(found)})).values()
        records = memoryview(data.records or b"")
        if not records:
            assert time.monotonic() < deadline, f"partition {partition} ends at {len(found)} of {count} records"
            await asyncio.sleep(0.01)
        while records:
            size = int.from_bytes(records[8:12], "big") + 12
            found += [record.value for record in DefaultRecordBatch(bytearray(records[:size]))]
            records = records[size:]
    return found


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_big_request_takes_a_turn_a_slice_of_records(tmp_path, shape) -> None:
    per_batch, batches, partitions = SHAPES[shape]
    records = per_batch * batches * partitions

    async def test(kafka) -> None:
        kafka.apis.topics.create("big", partitions)
        produced = kafka.apis.produce
        parts = {p: [batch(_values(p, b, per_batch)) for b in range(batches)] for p in range(partitions)}
        loop = asyncio.get_running_loop()
        turns = 0

        def count_turn() -> None:  # once a loop turn while the group is converted
            nonlocal turns
            turns += 1
            if produced.converting:
                loop.call_soon(count_turn)

        (answer,), taken = produced.produce_group([kafka.request(0, 9, _request(parts))], kafka.access)
        assert taken is not None and produced.converting == 1
        loop.call_soon(count_turn)
        answers = _answers(await answer)
        assert taken.done() and produced.converting == 0
        # the first slice was converted in the call; every further one took a turn of its own
        assert turns >= math.ceil(records / SLICE_RECORDS) - 1
        assert answers == {p: (ErrorCode.none, 0) for p in range(partitions)}
        for p in range(partitions):
            assert await _stored_values(kafka, p, per_batch * batches) == [
                value for b in range(batches) for value in _values(p, b, per_batch)]

    run_in_process(tmp_path, test)


def test_a_request_of_a_slice_is_taken_in_the_turn_it_came(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("big", 2)
        parts = {0: [batch(_values(0, 0, SLICE_RECORDS // 2))], 1: [batch(_values(1, 0, SLICE_RECORDS // 2))]}
        (answer,), taken = kafka.apis.produce.produce_group([kafka.request(0, 9, _request(parts))], kafka.access)
        assert taken is None and kafka.apis.produce.converting == 0
        assert _answers(await answer) == {0: (ErrorCode.none, 0), 1: (ErrorCode.none, 0)}

    run_in_process(tmp_path, test)


class _Client:
    """A raw Kafka connection on the test's loop."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    def send(self, api_key: int, version: int, body) -> None:
        self.correlation += 1
        self.writer.write(encode_request(api_key, version, self.correlation, "turns", body))

    async def answer(self, api_key: int, version: int):
        size = int.from_bytes(await self.reader.readexactly(4), "big")
        return decode_response(await self.reader.readexactly(size), api_key, version)


async def _listening(kafka) -> tuple[asyncio.Server, int]:
    admission = Admission(lambda _ip: True, lambda _ip: None, 0)
    server = await asyncio.get_running_loop().create_server(
        lambda: KafkaConnection(kafka.apis, 16 << 20, sasl=False, address=("127.0.0.1", 0), admission=admission),
        "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _client(port: int) -> _Client:
    return _Client(*await asyncio.open_connection("127.0.0.1", port))


async def _until(check, what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0)


def test_another_connection_is_answered_while_a_big_request_is_converted(tmp_path) -> None:
    async def test(kafka) -> None:
        kafka.apis.topics.create("big", 1)
        server, port = await _listening(kafka)
        try:
            big, other = await _client(port), await _client(port)
            big.send(0, 9, _request({0: [batch(_values(0, 0, 20 * SLICE_RECORDS))]}))
            await _until(lambda: kafka.apis.produce.converting, "the big request's conversion never started")
            other.send(18, 3, api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
            correlation, versions = await other.answer(18, 3)
            assert correlation == 1 and versions.error_code == ErrorCode.none
            assert kafka.apis.produce.converting == 1, "answered only once the big request was converted"
            correlation, stored = await big.answer(0, 9)
            assert correlation == 1 and _answers(stored) == {0: (ErrorCode.none, 0)}
            for client in (big, other):
                client.writer.close()
        finally:
            server.close()

    run_in_process(tmp_path, test)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("acks", [0, -1], ids=["acks=0", "acks=all"])
def test_requests_after_a_big_one_on_its_connection_are_stored_after_it(tmp_path, idempotent, acks) -> None:
    """A small request pipelined behind a big one to the same partition waits for the big one's
    conversion: stored after it (its offsets, its sequence accepted), answered after it."""
    sizes = [12 * SLICE_RECORDS, 3, 2 * SLICE_RECORDS, 1]

    async def test(kafka) -> None:
        kafka.apis.topics.create("big", 1)
        server, port = await _listening(kafka)
        try:
            client = await _client(port)
            producer = [-1, -1]
            if idempotent:
                client.send(22, 4, init.InitProducerIdRequest(
                    transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                    producer_epoch=-1))
                _, ids = await client.answer(22, 4)
                producer = [ids.producer_id, ids.producer_epoch]
            sequence = 0
            for index, size in enumerate(sizes):
                values = _values(0, index, size)
                records = batch(values, (producer[0], producer[1], sequence if idempotent else -1))
                client.send(0, 9, _request({0: [records]}, acks=acks))
                sequence += size
                if not index:  # the rest comes while the first is converted, not with it in one group
                    await _until(lambda: kafka.apis.produce.converting, "the big request's conversion never started")
            if acks:
                offsets = [_answers((await client.answer(0, 9))[1])[0] for _ in sizes]
                starts = [sum(sizes[:i]) for i in range(len(sizes))]
                assert offsets == [(ErrorCode.none, start) for start in starts]
            expected = [value for index, size in enumerate(sizes) for value in _values(0, index, size)]
            await _until(lambda: kafka.apis.produce.converting == 0, "never converted")
            assert await _stored_values(kafka, 0, len(expected)) == expected
            client.writer.close()
        finally:
            server.close()

    run_in_process(tmp_path, test)
