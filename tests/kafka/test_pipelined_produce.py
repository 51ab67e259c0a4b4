"""Produce requests pipelined on one connection (librdkafka at linger.ms=0 sends a request per
record without waiting for answers): taken while earlier ones wait for their write, answered
in request order, and any other request waits until every produce before it is answered."""

from __future__ import annotations

import datetime
import random
import re
import struct
from collections.abc import Iterator

import pytest
from admin_http import http_get
from kafka_brokers import KafkaStandalone, RawKafka, batch, produce_request, start_kafka_broker
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch_v4

from magnetar.kafka.connection import PIPELINED_PRODUCES
from magnetar.kafka.protocol.messages import decode_response, encode_request


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[KafkaStandalone]:
    started = start_kafka_broker(tmp_path_factory.mktemp("pipelined"))
    yield started
    started.stop()


def _fetch_all(topic: str) -> fetch_v4.FetchRequest:
    return fetch_v4.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                                 isolation_level=0, topics=(fetch_v4.FetchTopic(topic=topic, partitions=(
                                     fetch_v4.FetchPartition(partition=0, fetch_offset=0,
                                                             partition_max_bytes=1 << 20),)),))


def _records(data: bytes) -> int:
    """How many records a fetched record set holds (v2 batches: count at byte 57)."""
    count, at = 0, 0
    while at + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, at + 8)
        count += struct.unpack_from(">i", data, at + 57)[0]
        at += 12 + length
    return count


@pytest.mark.parametrize("seed", [1, 2])
def test_pipelined_produces_are_answered_in_order_and_a_fetch_behind_them_sees_them_all(broker, seed) -> None:
    rng = random.Random(seed)
    topic = f"pipelined-{seed}"
    raw = RawKafka(broker.bootstrap)
    raw.create_topic(topic)
    early = rng.randrange(1, PIPELINED_PRODUCES)  # a fetch while these are surely still being written
    count = 3 * PIPELINED_PRODUCES + rng.randrange(PIPELINED_PRODUCES)  # past the bound, so some wait
    acks = [rng.choice([-1, -1, 1, 0]) for _ in range(count)]
    frames = [encode_request(0, 9, n, "raw", produce_request(topic, batch([b"%d" % n]), acks=acks[n]))
              for n in range(count)]
    fetches = {early: encode_request(1, 4, 10_000 + early, "raw", _fetch_all(topic)),
               count: encode_request(1, 4, 10_000 + count, "raw", _fetch_all(topic))}
    raw.send_raw(b"".join(frames[:early]) + fetches[early] + b"".join(frames[early:]) + fetches[count])
    offsets = []
    for n in range(count + 1):
        if n in fetches:
            correlation, fetched = decode_response(raw.receive_frame(), 1, 4)
            assert correlation == 10_000 + n
            ((partition,),) = (t.partitions for t in fetched.responses)
            assert _records(partition.records) == n, "the fetch waited for every produce before it, and no more"
        if n < count and acks[n] != 0:
            correlation, response = decode_response(raw.receive_frame(), 0, 9)
            assert correlation == n, "answers leave in request order"
            ((partition,),) = (answer.partition_responses for answer in response.responses)
            assert partition.error_code == ErrorCode.none
            offsets.append(partition.base_offset)
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    raw.close()


def test_an_idempotent_producer_pipelining_is_stored_once_in_order(broker) -> None:
    """librdkafka's idempotent producer keeps up to five requests in flight."""
    topic = "pipelined-idempotent"
    raw = RawKafka(broker.bootstrap)
    raw.create_topic(topic)
    producer_id, epoch = raw.init_producer()
    count = 40
    requests = [encode_request(0, 9, n, "raw", produce_request(topic, batch([b"%d" % n], producer=(
        producer_id, epoch, n)))) for n in range(count)]
    answers = []
    # the last five again once answered: retries of a lost answer
    for sent in (range(count), range(count - 5, count)):
        raw.send_raw(b"".join(requests[n] for n in sent))
        for n in sent:
            correlation, response = decode_response(raw.receive_frame(), 0, 9)
            ((partition,),) = (answer.partition_responses for answer in response.responses)
            answers.append((correlation, partition.error_code, partition.base_offset))
            assert correlation == n
    assert [error for _, error, _ in answers] == [ErrorCode.none] * (count + 5)
    first = [offset for _, _, offset in answers[:count]]
    assert first == list(range(first[0], first[0] + count))
    assert [offset for _, _, offset in answers[count:]] == first[-5:], "a retry is answered with its offset"
    assert raw.latest(topic) == first[-1] + 1
    raw.close()


def _publish_count(broker: KafkaStandalone) -> float:
    status, _, body = http_get(f"{broker.admin_url}/metrics")
    assert status == 200
    (count,) = re.findall(r"^pulsar_broker_publish_latency_count\{[^}]*\} (\S+)$", body.decode(), re.M)
    return float(count)


def test_kafka_produces_join_the_broker_publish_latency(broker) -> None:
    """Each partition a Produce request stores counts as one publish, as a SEND does; a
    produce refused or sent with acks=0 (no answer to time) counts nothing."""
    topic = "pipelined-latency"
    raw = RawKafka(broker.bootstrap)
    raw.create_topic(topic)
    before = _publish_count(broker)
    stored = sum(raw.produce(topic, batch([b"a", b"b"]))[0] == ErrorCode.none for _ in range(7))
    assert stored == 7
    raw.send_raw(encode_request(0, 9, 99, "raw", produce_request(topic, batch([b"quiet"]), acks=0)))
    assert raw.produce(topic, b"\x00not a record batch")[0] != ErrorCode.none
    assert _publish_count(broker) - before == 7
    raw.close()
