"""The Kafka codec (magnetar.kafka.protocol), checked against kafka-python's independent one."""

from __future__ import annotations

import datetime
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KpApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest as KpMetadataRequest
from kafka.protocol.producer.produce import ProduceRequest as KpProduceRequest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kio.schema.api_versions.v3 import request as av_req
from kio.schema.api_versions.v3 import response as av_resp
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1 import response as md_resp_v1
from kio.schema.metadata.v9 import response as md_resp
from kio.schema.produce.v7 import request as produce7
from kio.static.primitive import i16, i32, i64

from magnetar.formats.kafka_records import all_steps
from magnetar.kafka.produce import ProduceApi
from magnetar.kafka.protocol.framing import FrameDecoder, FrameTooLarge
from magnetar.kafka.protocol.messages import (
    MalformedRequest,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
)
from magnetar.kafka.protocol.records import (
    InvalidRecords,
    from_pulsar_messages,
    pulsar_batch,
    pulsar_message_steps,
    split_batches,
    with_base_offset,
)
from magnetar.kafka.protocol.templates import Int64Templates
from magnetar.wire.batch import decode_messages
from magnetar.wire.proto import pulsar_api_pb2 as pb

VERSIONS = {0: (3, 9), 3: (0, 12), 18: (0, 3)}


def test_frames_survive_any_split_of_the_stream() -> None:
    rng = random.Random(7)
    frames = [rng.randbytes(rng.randint(0, 300)) for _ in range(50)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    decoder, got, pos = FrameDecoder(1000), [], 0
    while pos < len(stream):
        step = rng.randint(1, 40)
        got += decoder.feed(stream[pos : pos + step])
        pos += step
    assert got == frames and decoder.buffered == 0


@pytest.mark.parametrize("size", [1001, -1])
def test_a_size_beyond_the_limit_is_refused_before_its_bytes_arrive(size) -> None:
    with pytest.raises(FrameTooLarge, match=f"{size} bytes"):
        FrameDecoder(1000).feed(struct.pack(">i", size))


def _kp_encode(request, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A framed request as kafka-python writes it."""
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(version=version, header=True, framed=True))


def _frame_body(framed: bytes) -> bytes:
    (size,) = struct.unpack_from(">i", framed)
    assert size == len(framed) - 4
    return framed[4:]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_kafka_pythons_api_versions_requests_decode(version) -> None:
    """Header v1 up to v2, v2 (tagged fields) from v3: the client id is read right in both."""
    request = KpApiVersionsRequest[version](client_software_name="kp", client_software_version="3.0")
    framed = _kp_encode(request, version, 41, "kcat-1")
    decoded = decode_request(_frame_body(framed), VERSIONS)
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (18, version, 41,
                                                                                                 "kcat-1")
    if version >= 3:
        assert decoded.body.client_software_name == "kp"


def test_the_api_versions_response_header_has_no_tagged_fields() -> None:
    """ApiVersions v3 is flexible but its response header stays v0: a client reads it before it knows."""
    body = av_resp.ApiVersionsResponse(error_code=ErrorCode.none, throttle_time=datetime.timedelta(0), api_keys=(
        av_resp.ApiVersion(api_key=i16(0), min_version=i16(3), max_version=i16(9)),))
    framed = encode_response(18, 3, 99, body)
    decoded = KpApiVersionsResponse[3].decode(_frame_body(framed)[4:], version=3)
    assert [(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys] == [(0, 3, 9)]
    assert struct.unpack_from(">i", framed, 4) == (99,)


def test_a_flexible_response_header_carries_its_tagged_fields_byte() -> None:
    body = md_resp.MetadataResponse(throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c",
                                    controller_id=i32(0), topics=(), cluster_authorized_operations=i32(-2147483648))
    framed = encode_response(3, 9, 5, body)
    assert _frame_body(framed)[4] == 0  # the header's empty tagged fields
    assert decode_response(_frame_body(framed), 3, 9) == (5, body)


def test_a_body_encoded_before_is_framed_as_the_value_would_be() -> None:
    """Flexible (Metadata v9), flexible with a v0 header (ApiVersions v3), not flexible (Metadata v1)."""
    flexible = md_resp.MetadataResponse(throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c",
                                        controller_id=i32(0), topics=(),
                                        cluster_authorized_operations=i32(-2147483648))
    versions = av_resp.ApiVersionsResponse(error_code=ErrorCode.none, throttle_time=datetime.timedelta(0), api_keys=())
    plain = md_resp_v1.MetadataResponse(brokers=(), controller_id=i32(0), topics=())
    for api_key, version, body in ((3, 9, flexible), (18, 3, versions), (3, 1, plain)):
        assert encode_response(api_key, version, 7, encode_body(api_key, version, body)) == \
            encode_response(api_key, version, 7, body)


def test_kafka_pythons_produce_request_keeps_its_records_as_bytes() -> None:
    records = _batch([(b"k", b"v", [], 1)])
    topic = KpProduceRequest.TopicProduceData
    request = KpProduceRequest[7](transactional_id=None, acks=-1, timeout_ms=500, topic_data=[topic(
        name="orders", partition_data=[topic.PartitionProduceData(index=2, records=records)])])
    framed = _kp_encode(request, 7, 3, None)
    decoded = decode_request(_frame_body(framed), VERSIONS)
    partition = decoded.body.topic_data[0].partition_data[0]
    assert decoded.client_id is None and decoded.body.acks == -1
    assert (decoded.body.topic_data[0].name, partition.index, partition.records) == ("orders", 2, records)


def test_metadata_request_round_trip_through_kafka_python() -> None:
    request = KpMetadataRequest[12](topics=[KpMetadataRequest.MetadataRequestTopic(name="t")],
                                    allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    framed = _kp_encode(request, 12, 8, "c")
    decoded = decode_request(_frame_body(framed), VERSIONS)
    assert [t.name for t in decoded.body.topics] == ["t"] and decoded.body.allow_auto_topic_creation


@pytest.mark.parametrize(("api_key", "version"), [(0, 2), (0, 10), (3, 13), (99, 0), (1, 4)])
def test_unsupported_api_keys_and_versions_carry_the_correlation_id(api_key, version) -> None:
    frame = struct.pack(">hhih", api_key, version, 1234, 0) + b"\0" * 20
    with pytest.raises(UnsupportedVersion) as caught:
        decode_request(frame, VERSIONS)
    assert (caught.value.correlation_id, caught.value.api_key, caught.value.api_version) == (1234, api_key, version)


def _produce_frame() -> bytes:
    body = produce7.ProduceRequest(acks=i16(1), timeout=datetime.timedelta(seconds=1), topic_data=(
        produce7.TopicProduceData(name="t", partition_data=(
            produce7.PartitionProduceData(index=i32(0), records=_batch([(None, b"x", [], 5)])),)),))
    return _frame_body(encode_request(0, 7, 77, "me", body))


def test_every_truncation_of_a_request_is_malformed_not_a_crash() -> None:
    frame = _produce_frame()
    assert decode_request(frame, VERSIONS).correlation_id == 77
    for cut in range(len(frame)):
        with pytest.raises((MalformedRequest, UnsupportedVersion)):
            decode_request(frame[:cut], VERSIONS)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=200))
def test_random_bytes_after_a_valid_head_never_escape_as_other_errors(tail) -> None:
    for api_key, version in ((0, 7), (3, 9), (18, 3)):
        try:
            decode_request(struct.pack(">hhih", api_key, version, 1, -1) + tail, VERSIONS)
        except MalformedRequest as exc:
            assert exc.correlation_id == 1


# --- record batches -------------------------------------------------------------------------

def _batch(records, codec: int = 0, base_offset: int = 0, producer=(-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 22)
    for offset, (key, value, headers, timestamp) in enumerate(records):
        builder.append(base_offset + offset, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


_records = st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(max_size=10).map(str.encode)), max_size=3),
    st.integers(min_value=1, max_value=2**41)), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(_records, st.sampled_from([0, 1, 3, 4]), st.integers(min_value=0, max_value=2**40))
def test_kafka_to_pulsar_to_kafka_keeps_every_record(records, codec, base_offset) -> None:
    """kafka-python's batch -> one Pulsar batch -> a batch kafka-python reads back the same, from base_offset
    (snappy: kafka-python needs python-snappy to write it; librdkafka covers it end to end)."""
    (batch,) = split_batches(_batch(records, codec))
    converted = pulsar_batch(*all_steps(pulsar_message_steps(batch, 1 << 24)))
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, compression=converted.compression,
                                  uncompressed_size=converted.uncompressed_size,
                                  num_messages_in_batch=converted.num_messages)
    messages = decode_messages(metadata, converted.payload, max_size=1 << 24)
    back = DefaultRecordBatch(bytearray(from_pulsar_messages(messages, base_offset, publish_time=1)))
    assert back.validate_crc() and back.base_offset == base_offset
    got = [(r.offset, r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp) for r in back]
    assert got == [(base_offset + i, k, v, [(hk, hv) for hk, hv in h], t)
                   for i, (k, v, h, t) in enumerate(records)]


@settings(max_examples=50, deadline=None)
@given(st.lists(_records, min_size=1, max_size=4), st.integers(min_value=0, max_value=2**50))
def test_batches_split_and_rebase_without_touching_their_crc(batches, base_offset) -> None:
    raw = [_batch(records, producer=(7, 1, 3)) for records in batches]
    split = split_batches(b"".join(raw))
    assert [bytes(b.data) for b in split] == raw and [b.count for b in split] == [len(r) for r in batches]
    assert split[0].header.producer_id == 7 and split[0].header.base_sequence == 3
    rebased = DefaultRecordBatch(bytearray(b"".join(with_base_offset(split[-1].data, base_offset))))
    assert rebased.validate_crc() and rebased.base_offset == base_offset
    assert [r.offset for r in rebased] == [base_offset + i for i in range(len(batches[-1]))]


def test_a_flipped_bit_anywhere_under_the_crc_is_corrupt() -> None:
    batch = bytearray(_batch([(b"k", b"value", [("h", b"1")], 10)] * 3))
    rng = random.Random(3)
    for _ in range(40):
        broken = bytearray(batch)
        position = rng.randrange(21, len(batch))
        broken[position] ^= 1 << rng.randrange(8)
        with pytest.raises(InvalidRecords, match="CRC32C mismatch") as caught:
            split_batches(bytes(broken))
        assert caught.value.corrupt


@pytest.mark.parametrize(("mutate", "message", "corrupt"), [
    (lambda b: b[:-1], "runs past the records", True),
    (lambda b: b + b"\0" * 10, "cannot hold a record batch", True),
    (lambda b: b[:16] + b"\x01" + b[17:], "magic 1", False),
    (lambda b: b"", "no record batch", False),
])
def test_malformed_records_are_refused(mutate, message, corrupt) -> None:
    with pytest.raises(InvalidRecords, match=message) as caught:
        split_batches(mutate(_batch([(None, b"v", [], 1)])))
    assert caught.value.corrupt is corrupt


def test_pulsar_messages_become_a_batch_with_binary_keys_and_tombstones() -> None:
    (batch,) = split_batches(_batch([(b"\xff\x00", None, [], 3), (b"text", b"v", [("a", b"b")], 0)]))
    converted = pulsar_batch(*all_steps(pulsar_message_steps(batch, 1 << 24)))
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1,
                                  num_messages_in_batch=converted.num_messages)
    messages = decode_messages(metadata, converted.payload, max_size=1 << 20)
    assert messages[0].metadata.null_value and messages[0].metadata.partition_key_b64_encoded
    back = list(DefaultRecordBatch(bytearray(from_pulsar_messages(messages, 9, publish_time=1234))))
    assert [(r.key, r.value, r.timestamp) for r in back] == [(b"\xff\x00", None, 3), (b"text", b"v", 1234)]


def test_api_versions_request_v3_body_round_trips() -> None:
    body = av_req.ApiVersionsRequest(client_software_name="magnetar-test", client_software_version="1")
    decoded = decode_request(_frame_body(encode_request(18, 3, 1, "x", body)), VERSIONS)
    assert decoded.body == body
    assert decoded.body.client_software_name == "magnetar-test"
    assert i64(0) == 0


def test_a_filled_produce_response_template_is_what_kio_encodes() -> None:
    rng = random.Random()
    templates = Int64Templates(0)
    for _ in range(200):
        version = rng.randint(3, 9)
        shape = tuple((rng.choice(["t", "orders", "ünï"]), rng.randrange(8)) for _ in range(rng.randint(1, 4)))
        offsets = [rng.choice([0, 1, -1, rng.randrange(1 << 62)]) for _ in shape]

        def body(values, shape=shape, version=version):
            answers = [(t, i, ErrorCode.none, v, None) for (t, i), v in zip(shape, values, strict=True)]
            return ProduceApi._body(version, answers)

        assert templates.fill(version, shape, offsets, body) == encode_body(0, version, body(offsets))
