"""What a Kafka listener does with bytes no well-behaved client sends, and idempotence's edges."""

from __future__ import annotations

import random
import struct
import subprocess
import uuid

import pytest
from kafka_brokers import (
    RawKafka,
    batch,
    produce_request,
    start_kafka_broker,
)
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.errors import ErrorCode
from polling import wait_for
from procfs import rss_kb
from standalone import Standalone

from magnetar.formats.kafka_compression import CODEC_GZIP, CODEC_ZSTD
from magnetar.formats.kafka_records import encode_record_batch
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
    raw().create_topic(name)
    return name


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
    framed = encode_request(0, 9, 1, "bad", produce_request(topic, batch([b"v"])))
    cut = random.randrange(20, len(framed) - 4)
    connection.send_raw(struct.pack(">i", cut) + framed[4 : 4 + cut])
    assert connection.receive_frame() is None
    assert raw().latest(topic) == 0


def test_a_frame_over_the_limit_closes_the_connection_before_its_bytes_arrive(raw) -> None:
    connection = raw()
    connection.send_raw(struct.pack(">i", 10 * 1024 * 1024))
    assert connection.receive_frame() is None
    _api_versions_still_answer(raw)


def test_a_bad_crc_is_corrupt_message_and_nothing_is_stored(raw) -> None:
    topic = _topic(raw)
    corrupt = bytearray(batch([b"one", b"two"]))
    corrupt[-1] ^= 0x01
    connection = raw()
    error, _ = connection.produce(topic, bytes(corrupt))
    assert error == ErrorCode.corrupt_message
    assert connection.latest(topic) == 0
    assert connection.produce(topic, batch([b"ok"])) == (ErrorCode.none, 0)


def test_a_batch_over_max_message_size_is_message_too_large(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    error, _ = connection.produce(topic, batch([random.randbytes(105_000)] * 2))
    assert error == ErrorCode.message_too_large
    assert connection.latest(topic) == 0


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_ZSTD])
def test_a_small_batch_decompressing_past_max_message_size_is_message_too_large(broker, raw, codec) -> None:
    """maxMessageSize holds a batch's compressed bytes; its records become one Pulsar batch, whose
    uncompressed size a Pulsar consumer holds to maxMessageSize too. A hostile batch of 100 MB of
    zeros is under 200 KB compressed: refused whole, without the broker expanding it, and the
    partition takes the next batch as if it never came."""
    topic = _topic(raw)
    connection = raw()
    bomb = encode_record_batch([(None, bytes(100 * 1024 * 1024), [], 0)], codec)
    assert len(bomb) < 200_000
    before = rss_kb(broker.proc.pid)
    error, _ = connection.produce(topic, bomb)
    grown_mb = (rss_kb(broker.proc.pid) - before) / 1024
    assert error == ErrorCode.message_too_large
    assert connection.latest(topic) == 0
    assert grown_mb < 50, f"the broker grew {grown_mb:.0f} MB refusing it"
    over = encode_record_batch([(None, bytes(250_000), [], 0)], codec)  # the partition's bound, not a broad one
    assert connection.produce(topic, over)[0] == ErrorCode.message_too_large
    fits = encode_record_batch([(None, bytes(150_000), [], 0)], codec)
    assert connection.produce(topic, fits) == (ErrorCode.none, 0)


def test_acks_zero_gets_no_response_and_later_responses_keep_their_order(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    connection.send_raw(encode_request(0, 9, 100, "c", produce_request(topic, batch([b"fire", b"forget"]), acks=0)))
    assert connection.produce(topic, batch([b"third"])) == (ErrorCode.none, 2)


def test_a_retried_batch_is_stored_once_and_answered_with_its_first_offset(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    producer = connection.init_producer()
    first = batch([b"a", b"b", b"c"], (*producer, 0))
    assert connection.produce(topic, first) == (ErrorCode.none, 0)
    assert connection.produce(topic, first) == (ErrorCode.none, 0)
    assert connection.latest(topic) == 3
    gap = batch([b"e"], (*producer, 5))
    error, _ = connection.produce(topic, gap)
    assert error == ErrorCode.out_of_order_sequence_number
    follows = batch([b"d"], (*producer, 3))
    assert connection.produce(topic, follows) == (ErrorCode.none, 3)
    assert connection.latest(topic) == 4


def test_a_request_refused_for_one_batch_leaves_the_others_sequences_free(raw) -> None:
    topic = _topic(raw)
    connection = raw()
    producer = connection.init_producer()
    first, gap = batch([b"a", b"b"], (*producer, 0)), batch([b"z"], (*producer, 7))
    assert connection.produce(topic, first + gap)[0] == ErrorCode.out_of_order_sequence_number
    assert connection.latest(topic) == 0
    assert connection.produce(topic, first) == (ErrorCode.none, 0)  # sent again alone, it is the next one


def _kafka_clients_at(port: int) -> None:
    """kcat, kafka-python's raw ApiVersions and librdkafka's Metadata sent to `port` (the Pulsar port)."""
    connection = RawKafka(f"127.0.0.1:{port}")
    connection.send_raw(encode_request(18, 3, 1, "wrong-port", api_versions.ApiVersionsRequest(
        client_software_name="t", client_software_version="1")))
    assert connection.receive_frame() is None  # closed at once, not left waiting for 30 s
    connection.close()
    subprocess.run(["kcat", "-L", "-b", f"127.0.0.1:{port}", "-m", "1"], check=False, capture_output=True, timeout=60)


def test_a_kafka_client_at_the_pulsar_port_is_told_where_the_kafka_listener_is(broker) -> None:
    _kafka_clients_at(broker.port)
    lines = [line for line in broker.log().splitlines() if "Kafka request to the Pulsar protocol port" in line]
    assert lines and all(line.endswith(f"(this broker's Kafka listener: PLAINTEXT://127.0.0.1:{broker.kafka_port})")
                         for line in lines)
    assert "command size" not in broker.log()


def test_a_kafka_client_at_a_broker_without_kafka_is_told_there_is_no_listener(tmp_path) -> None:
    plain = Standalone(tmp_path / "data").start()
    try:
        _kafka_clients_at(plain.port)
        assert wait_for(lambda: "sent a Kafka request to the Pulsar protocol port; closing (this broker has no "
                                "Kafka listener: messagingProtocols=kafka and kafkaListeners add one)" in plain.log())
    finally:
        plain.stop()
