"""Kafka producers meet the policies a Pulsar producer meets, each with Kafka's error: a backlog
quota (producer_exception: POLICY_VIOLATION; producer_request_hold: NOT_ENOUGH_REPLICAS, which
producers retry: they wait it out, as Pulsar's client holds its sends), schemaValidationEnforced
(INVALID_RECORD), a terminated topic (POLICY_VIOLATION). The official Pulsar client is
refused on the same topics, for comparison."""

from __future__ import annotations

import json
import time
import uuid

import pulsar
import pytest
from admin_http import http
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError, PolicyViolationError
from kafka_brokers import start_kafka_broker
from polling import wait_for

NAMESPACE = "public/default"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    started = start_kafka_broker(tmp_path_factory.mktemp("policies"))
    yield started
    started.stop()


def _rest(broker, method: str, path: str, body: object = None) -> None:
    status, _, answer = http(method, f"{broker.admin_url}/admin/v2/{path}",
                             None if body is None else json.dumps(body).encode())
    assert status in (200, 204), (method, path, status, answer)


def _topic(broker) -> str:
    topic = f"p-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    return topic


def _deliver(broker, topic: str, value: bytes, **config) -> KafkaError | None:
    """What librdkafka's delivery report says of one record (None: stored)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, **config})
    reports: list = []
    producer.produce(topic, value, on_delivery=lambda err, msg: reports.append(err))
    producer.flush(60)
    return reports[0]


def _refused(broker, topic: str, code: int, kafka_python_error: type) -> None:
    """librdkafka's delivery report says `code`, kafka-python's send raises `kafka_python_error`."""
    error = _deliver(broker, topic, b"refused")
    assert error is not None and error.code() == code, error
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
    try:
        with pytest.raises(kafka_python_error):
            producer.send(topic, b"refused too").get(timeout=30)
    finally:
        producer.close()


def test_a_backlog_quota_holds_kafka_producers_as_it_holds_pulsar_producers(broker, client_factory) -> None:
    topic = _topic(broker)
    full = f"persistent://{NAMESPACE}/{topic}"
    client = client_factory(broker.url)
    slow = client.subscribe(full, "slow", initial_position=pulsar.InitialPosition.Earliest)
    assert _deliver(broker, topic, b"x" * 2000) is None  # the backlog the quota is over
    _rest(broker, "POST", f"persistent/{NAMESPACE}/{topic}/backlogQuota",
          {"limitSize": 1000, "limitTime": -1, "policy": "producer_exception"})
    _refused(broker, topic, KafkaError.POLICY_VIOLATION, PolicyViolationError)
    with pytest.raises(Exception, match="ProducerBlockedQuotaExceeded"):
        client.create_producer(full)
    # producer_request_hold: the Kafka producer retries, and stores once the subscription catches up
    _rest(broker, "POST", f"persistent/{NAMESPACE}/{topic}/backlogQuota",
          {"limitSize": 1000, "limitTime": -1, "policy": "producer_request_hold"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retry.backoff.ms": 50,
                         "delivery.timeout.ms": 60_000})
    reports: list = []
    producer.produce(topic, b"held", on_delivery=lambda err, msg: reports.append(err or msg.offset()))
    producer.flush(1)
    assert reports == []  # held
    slow.acknowledge_cumulative(slow.receive(10_000))
    assert wait_for(lambda: producer.poll(0.1) is not None and bool(reports), timeout=30)
    assert reports == [1]


def test_an_enforced_schema_refuses_kafka_records_as_it_refuses_pulsar_producers(broker, client_factory) -> None:
    topic = _topic(broker)
    _rest(broker, "POST", f"schemas/{NAMESPACE}/{topic}/schema", {"type": "STRING", "schema": "", "properties": {}})
    assert _deliver(broker, topic, b"allowed while not enforced") is None
    _rest(broker, "POST", f"persistent/{NAMESPACE}/{topic}/schemaValidationEnforced", True)
    _refused(broker, topic, KafkaError.INVALID_RECORD, InvalidRecordError)
    with pytest.raises(Exception, match="IncompatibleSchema"):
        client_factory(broker.url).create_producer(f"persistent://{NAMESPACE}/{topic}")


def test_a_terminated_topic_takes_no_more_kafka_records(broker, client_factory) -> None:
    topic = _topic(broker)
    assert _deliver(broker, topic, b"before") is None
    _rest(broker, "POST", f"persistent/{NAMESPACE}/{topic}-partition-0/terminate")
    error = _deliver(broker, topic, b"after")
    assert error is not None and error.code() == KafkaError.POLICY_VIOLATION, error
    with pytest.raises(Exception, match="TopicTerminated"):
        client_factory(broker.url).create_producer(f"persistent://{NAMESPACE}/{topic}-partition-0")


def test_a_publish_rate_slows_kafka_producers_without_losing_records(broker) -> None:
    """As Kafka's quotas do: answers carry throttle_time_ms (librdkafka's throttle_cb sees it)
    and the connection is not read until the wait is over; every record is delivered."""
    rate, seconds, in_flight = 200, 2.0, 100
    topic = _topic(broker)
    _rest(broker, "POST", f"persistent/{NAMESPACE}/{topic}/publishRate",
          {"publishThrottlingRateInMsg": rate, "publishThrottlingRateInByte": -1})
    throttles: list[int] = []
    reports: list = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    produced = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if len(producer) < in_flight:  # as fast as it goes, with a bounded queue to flush at the end
            producer.produce(topic, b"r%d" % produced, on_delivery=lambda err, msg: reports.append(err))
            produced += 1
        else:
            producer.poll(0.005)
    assert producer.flush(60) == 0
    elapsed = time.monotonic() - start
    assert len(reports) == produced and set(reports) == {None}, (produced, len(reports))
    assert produced <= 1.5 * rate * elapsed + rate + in_flight, (produced, elapsed)
    assert produced >= 0.5 * rate * elapsed, (produced, elapsed)
    assert throttles and max(throttles) > 0, throttles
    watermarks = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        assert watermarks.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, produced)  # each once
    finally:
        watermarks.close()
