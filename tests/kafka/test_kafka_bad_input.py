"""What a Kafka listener does with bytes no well-behaved client sends, and idempotence's edges."""

from __future__ import annotations

import datetime
import random
import struct
import uuid

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_brokers import RawKafka, start_kafka_broker
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v12 import request as metadata
from kio.schema.produce.v9 import request as produce

from magnetar.kafka.protocol.messages import decode_response, encode_request


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    started = start_kafka_broker(tmp_path_factory.mktemp("bad"), "maxMessageSize=200000")
    yield started
    started.stop()


@pytest.fixture
def raw(broker):
    connections: list[RawKafka] = []

    def connect() -> RawKafka:
        connections.append(RawKafka(broker.bootstrap))
        return connections[-1]

    yield connect
    for connection in connections:
        connection.close()


def _topic(raw) -> str:
    name = f"bad-{uuid.uuid4().hex[:8]}"
    request = metadata.MetadataRequest(topics=(metadata.MetadataRequestTopic(name=name, topic_id=None),),
                                       allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    (topic,) = raw().call(3, 12, request).topics
    assert topic.error_code == ErrorCode.none and len(topic.partitions) == 1
    return name


def _batch(values: list[bytes], producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer[0],
                                        producer_epoch=producer[1], base_sequence=producer[2], batch_size=1 << 24)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def _produce(topic: str, records: bytes, acks: int = -1) -> produce.ProduceRequest:
    return produce.ProduceRequest(acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
        produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=0, records=records),)),))


def _partition_result(response):
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition.error_code, partition.base_offset


def _latest(connection: RawKafka, topic: str) -> int:
    request = list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        list_offsets.ListOffsetsTopic(name=topic, partitions=(
            list_offsets.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    ((partition,),) = (t.partitions for t in connection.call(2, 7, request).topics)
    return partition.offset


def _api_versions_still_answer(raw) -> None:
    response = raw().call(18, 3, api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert response.error_code == ErrorCode.none


def test_an_api_versions_newer_than_the_broker_gets_v0_with_unsupported_version(raw) -> None:
    connection = raw()
    connection.send_raw(struct.pack(">ihhih", 10, 18, 99, 7, -1))
    correlation, response = decode_response(connection.receive_frame(), 18, 0)
    assert correlation == 7 and response.error_code == ErrorCode.unsupported_version
    assert {(k.api_key, k.min_version, k.max_version) for k in response.api_keys} >= {(0, 3, 9), (1, 4, 12)}


@pytest.mark.parametrize(("api_key", "version"), [(99, 0), (0, 2), (1, 3), (3, 13)])
def test_an_unknown_api_or_version_closes_that_connection_only(raw, api_key, version) -> None:
    bystander = raw()
    connection = raw()
    connection.send_raw(struct.pack(">ihhih", 10, api_key, version, 1, -1))
    assert connection.receive_frame() is None
    assert bystander.call(18, 3, api_versions.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    _api_versions_still_answer(raw)


def test_a_malformed_request_closes_its_connection_and_stores_nothing(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    framed = encode_request(0, 9, 1, "bad", _produce(topic, _batch([b"v"])))
    cut = random.randrange(20, len(framed) - 4)
    connection.send_raw(struct.pack(">i", cut) + framed[4 : 4 + cut])
    assert connection.receive_frame() is None
    assert _latest(raw(), topic) == 0


def test_a_frame_over_the_limit_closes_the_connection_before_its_bytes_arrive(raw) -> None:
    connection = raw()
    connection.send_raw(struct.pack(">i", 10 * 1024 * 1024))
    assert connection.receive_frame() is None
    _api_versions_still_answer(raw)


def test_a_bad_crc_is_corrupt_message_and_nothing_is_stored(raw) -> None:
    topic = _topic(raw)
    batch = bytearray(_batch([b"one", b"two"]))
    batch[-1] ^= 0x01
    connection = raw()
    assert _partition_result(connection.call(0, 9, _produce(topic, bytes(batch))))[0] == ErrorCode.corrupt_message
    assert _latest(connection, topic) == 0
    assert _partition_result(connection.call(0, 9, _produce(topic, _batch([b"ok"])))) == (ErrorCode.none, 0)


def test_a_batch_over_max_message_size_is_message_too_large(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    response = connection.call(0, 9, _produce(topic, _batch([random.randbytes(105_000)] * 2)))
    assert _partition_result(response)[0] == ErrorCode.message_too_large
    assert _latest(connection, topic) == 0


def test_acks_zero_gets_no_response_and_later_responses_keep_their_order(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    connection.send_raw(encode_request(0, 9, 100, "c", _produce(topic, _batch([b"fire", b"forget"]), acks=0)))
    assert _partition_result(connection.call(0, 9, _produce(topic, _batch([b"third"])))) == (ErrorCode.none, 2)


def test_a_retried_batch_is_stored_once_and_answered_with_its_first_offset(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    ids = connection.call(22, 4, init_producer_id.InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1))
    producer = (ids.producer_id, ids.producer_epoch)
    first = _batch([b"a", b"b", b"c"], (*producer, 0))
    assert _partition_result(connection.call(0, 9, _produce(topic, first))) == (ErrorCode.none, 0)
    assert _partition_result(connection.call(0, 9, _produce(topic, first))) == (ErrorCode.none, 0)
    assert _latest(connection, topic) == 3
    gap = _batch([b"e"], (*producer, 5))
    assert _partition_result(connection.call(0, 9, _produce(topic, gap)))[0] == ErrorCode.out_of_order_sequence_number
    follows = _batch([b"d"], (*producer, 3))
    assert _partition_result(connection.call(0, 9, _produce(topic, follows))) == (ErrorCode.none, 3)
    assert _latest(connection, topic) == 4
