"""Produce requests taken as a group (the ones of one read: librdkafka pipelines a request per
record at linger.ms=0): stored with one check and one append per partition, yet each answered
on its own, in request order, each partition with its own error or offset.

A raw client writes many requests in one write, over several topics and partitions, acks 0, 1
and all mixed, with partitions refused in the middle (a batch over the topic's
max.message.bytes, a corrupt batch, a terminated topic); then real clients (librdkafka,
kafka-python, aiokafka, kafkajs) send a record per request without waiting, idempotent ones
across several partitions and non-idempotent ones beside a refused topic.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest
from admin_http import http
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.record.memory_records import MemoryRecords
from kafka_brokers import KafkaStandalone, RawKafka, batch, start_kafka_broker
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4 import request as fetch_v4
from kio.schema.produce.v9 import request as produce
from polling import wait_for
from racing_clients import INSTALL_KAFKAJS, JS

from magnetar.kafka.protocol.messages import decode_response, encode_request

NAMESPACE = "public/default"
PARTITIONS = 3
MAX_MESSAGE_BYTES = 2000


@pytest.fixture(scope="module")
def pulsar_format_broker(tmp_path_factory) -> Iterator[KafkaStandalone]:
    started = start_kafka_broker(tmp_path_factory.mktemp("groups"))
    yield started
    started.stop()


def _topics(broker: KafkaStandalone, *, terminated: bool = False) -> tuple[str, str | None]:
    """A topic of PARTITIONS partitions taking batches of MAX_MESSAGE_BYTES at most, and with
    `terminated` a one-partition topic that takes nothing."""
    topic, refused = f"g-{uuid.uuid4().hex[:8]}", f"r-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    wanted = [NewTopic(topic, PARTITIONS, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})]
    wanted += [NewTopic(refused, 1)] if terminated else []
    for future in admin.create_topics(wanted).values():
        future.result(30)
    if not terminated:
        return topic, None
    raw = RawKafka(broker.bootstrap)
    assert raw.produce(refused, batch([b"before"]))[0] == ErrorCode.none  # loaded, then terminated
    raw.close()
    status, _, answer = http("POST", f"{broker.admin_url}/admin/v2/persistent/{NAMESPACE}/{refused}-partition-0/"
                                     "terminate")
    assert status in (200, 204), answer
    return topic, refused


def _fetch(bootstrap: str, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record stored in a partition."""
    raw = RawKafka(bootstrap)
    request = fetch_v4.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=8 << 20,
                                    isolation_level=0, topics=(fetch_v4.FetchTopic(topic=topic, partitions=(
                                        fetch_v4.FetchPartition(partition=partition, fetch_offset=0,
                                                                partition_max_bytes=8 << 20),)),))
    ((answer,),) = (t.partitions for t in raw.call(1, 4, request).responses)
    raw.close()
    records, found = MemoryRecords(answer.records or b""), []
    while (stored := records.next_batch()) is not None:
        found += [(record.offset, record.value) for record in stored]
    return found


def _stored(bootstrap: str, topic: str, expected: dict[int, list[bytes]]) -> dict[int, list[tuple[int, bytes]]]:
    """Each partition's records once it holds as many as `expected` says (acks=0 ones land late)."""
    found: dict[int, list[tuple[int, bytes]]] = {}

    def complete() -> bool:
        found.update({p: _fetch(bootstrap, topic, p) for p in expected})
        return all(len(found[p]) >= len(values) for p, values in expected.items())

    wait_for(complete, timeout=30)
    return found


def _corrupt(records: bytes) -> bytes:
    """The batch with its last byte changed: its CRC-32C no longer matches."""
    return records[:-1] + bytes([records[-1] ^ 0xFF])


class _Part(NamedTuple):
    topic: str
    partition: int
    records: bytes
    value: bytes | None  # what is stored when it is accepted
    error: ErrorCode


@pytest.mark.parametrize("seed", [11, 12])
def test_a_group_answers_each_request_in_order_and_each_partition_its_own(kafka_broker, seed) -> None:
    rng = random.Random(seed)
    topic, terminated = _topics(kafka_broker, terminated=True)
    assert terminated is not None
    requests: list[tuple[int, list[_Part]]] = []
    for n in range(120):
        parts = []
        for partition in rng.sample(range(PARTITIONS), rng.choice([1, 1, 1, 2, 3])):
            value = b"r%d-p%d" % (n, partition)
            kind = rng.choices(["stored", "too large", "corrupt", "terminated"], [12, 1, 1, 1])[0]
            if kind == "stored":
                parts.append(_Part(topic, partition, batch([value]), value, ErrorCode.none))
            elif kind == "too large":
                parts.append(_Part(topic, partition, batch([value * 400]), None, ErrorCode.message_too_large))
            elif kind == "corrupt":
                parts.append(_Part(topic, partition, _corrupt(batch([value])), None, ErrorCode.corrupt_message))
            else:
                parts.append(_Part(terminated, 0, batch([value]), None, ErrorCode.policy_violation))
        requests.append((rng.choice([-1, -1, 1, 0]), parts))
    frames = []
    for n, (acks, parts) in enumerate(requests):
        by_topic: dict[str, list[produce.PartitionProduceData]] = {}
        for part in parts:
            by_topic.setdefault(part.topic, []).append(produce.PartitionProduceData(index=part.partition,
                                                                                    records=part.records))
        frames.append(encode_request(0, 9, n, "raw", produce.ProduceRequest(
            acks=acks, timeout=datetime.timedelta(seconds=10), transactional_id=None, topic_data=tuple(
                produce.TopicProduceData(name=name, partition_data=tuple(data)) for name, data in by_topic.items()))))
    raw = RawKafka(kafka_broker.bootstrap)
    raw.send_raw(b"".join(frames))  # one write: the broker reads many requests at once
    answered: dict[bytes, int] = {}
    for n, (acks, parts) in enumerate(requests):
        if acks == 0:
            continue
        frame = raw.receive_frame()
        assert frame is not None, "the broker closed the connection"
        correlation, response = decode_response(frame, 0, 9)
        assert correlation == n, "answers leave in request order"
        got = {(t.name, p.index): (p.error_code, p.base_offset) for t in response.responses
               for p in t.partition_responses}
        assert {(p.topic, p.partition): p.error for p in parts} == {key: error for key, (error, _) in got.items()}
        answered.update({p.value: got[p.topic, p.partition][1] for p in parts if p.value is not None})
    raw.close()
    expected = {p: [part.value for _, parts in requests for part in parts
                    if part.partition == p and part.topic == topic and part.value is not None]
                for p in range(PARTITIONS)}
    stored = _stored(kafka_broker.bootstrap, topic, expected)
    for partition, values in expected.items():
        assert [value for _, value in stored[partition]] == values, "stored once each, in request order"
        offsets = dict((value, offset) for offset, value in stored[partition])
        assert all(answered[value] == offsets[value] for value in values if value in answered), \
            "each partition is answered with its own record's offset"
    assert _fetch(kafka_broker.bootstrap, terminated, 0)[-1][1] == b"before"


class _Sent(NamedTuple):
    delivered: int
    refused: list[str]  # Kafka's error names, one per send to the refused topic


def _librdkafka(bootstrap: str, topic: str, count: int, idempotent: bool, refused_topic: str | None) -> _Sent:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "batch.num.messages": 1,
                         "enable.idempotence": idempotent})
    delivered: list[object] = []
    refused: list[str] = []
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: delivered.append(err))
        if refused_topic is not None and i % 7 == 3:
            producer.produce(refused_topic, b"v%d" % i, partition=0,
                             on_delivery=lambda err, _msg: refused.append(err.name() if err else "NONE"))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert delivered == [None] * count, delivered
    return _Sent(count, refused)


def _kafka_python(bootstrap: str, topic: str, count: int, idempotent: bool, refused_topic: str | None) -> _Sent:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, batch_size=1, acks="all",
                             enable_idempotence=idempotent)
    sends = [(producer.send(topic, b"v%d" % i, partition=i % PARTITIONS),
              producer.send(refused_topic, b"v%d" % i, partition=0) if refused_topic and i % 7 == 3 else None)
             for i in range(count)]
    producer.flush(60)
    refused = []
    for stored, refusal in sends:
        stored.get(timeout=60)
        if refusal is not None:
            refused.append(getattr(refusal.exception, "message", "NONE"))
    producer.close()
    return _Sent(count, refused)


def _aiokafka(bootstrap: str, topic: str, count: int, idempotent: bool, refused_topic: str | None) -> _Sent:
    async def run() -> _Sent:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all",
                                    enable_idempotence=idempotent)
        await producer.start()
        try:
            stored, refusals = [], []
            for i in range(count):
                stored.append(await producer.send(topic, b"v%d" % i, partition=i % PARTITIONS))
                if refused_topic is not None and i % 7 == 3:
                    refusals.append(await producer.send(refused_topic, b"v%d" % i, partition=0))
            await asyncio.gather(*stored)
            outcomes = await asyncio.gather(*refusals, return_exceptions=True)
        finally:
            await producer.stop()
        return _Sent(count, [getattr(outcome, "message", "NONE") for outcome in outcomes])

    return asyncio.run(run())


def _kafkajs(bootstrap: str, topic: str, count: int, idempotent: bool, refused_topic: str | None) -> _Sent:
    assert (JS / "node_modules" / "kafkajs").is_dir(), INSTALL_KAFKAJS
    out = subprocess.run(["node", str(JS / "groups.js"), bootstrap, topic, str(PARTITIONS), str(count),
                          str(int(idempotent)), *([refused_topic] if refused_topic else [])],
                         check=True, capture_output=True, text=True, timeout=120)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert "error" not in answer, answer
    return _Sent(len(answer["delivered"]), answer["refused"])


CLIENTS: dict[str, Callable[[str, str, int, bool, str | None], _Sent]] = {
    "librdkafka": _librdkafka, "kafka-python": _kafka_python, "aiokafka": _aiokafka, "kafkajs": _kafkajs}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "refused-topic-beside"])
def test_a_producer_sending_a_request_per_record_has_each_stored_once_in_order(pulsar_format_broker, client,
                                                                             idempotent) -> None:
    """Idempotent: the sequences of every partition run on across the groups, nothing stored
    twice. Not idempotent, with every seventh record also sent to a terminated topic: those
    are refused (POLICY_VIOLATION), every other record is stored."""
    count = 150
    topic, refused_topic = _topics(pulsar_format_broker, terminated=not idempotent)
    sent = CLIENTS[client](pulsar_format_broker.bootstrap, topic, count, idempotent, refused_topic)
    assert sent.delivered == count
    if refused_topic is not None:
        assert sent.refused == ["POLICY_VIOLATION"] * len(range(3, count, 7))
    expected = {p: [b"v%d" % i for i in range(p, count, PARTITIONS)] for p in range(PARTITIONS)}
    stored = _stored(pulsar_format_broker.bootstrap, topic, expected)
    assert {p: [value for _, value in records] for p, records in stored.items()} == expected
