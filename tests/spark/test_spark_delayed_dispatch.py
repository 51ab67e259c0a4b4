"""`magnetar.spark.delayed_dispatch` against a real broker: messages with a deliver time
reach the output topic never before it, and a restart of the query from its checkpoint
(while messages are pending in its state) neither loses nor duplicates one."""

from __future__ import annotations

import time
from collections import Counter

import pulsar
import pytest
from spark_helpers import INTERCEPTORS
from standalone import Standalone

from magnetar.spark.delayed_dispatch import delayed_dispatch

CONFIG = [INTERCEPTORS, "exposingBrokerEntryMetadataToClientEnabled=true", "brokerDeduplicationEnabled=true"]
DEADLINE_SECONDS = 240.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    started = Standalone(tmp_path_factory.mktemp("delayed-dispatch") / "data", CONFIG).start()
    yield started
    started.stop()


def receive_until(consumer: pulsar.Consumer, got: list, count: int, deadline: float, query=None) -> None:
    """Append (value, properties, publish ms, receive ms) until `count` are held or the deadline."""
    while len(got) < count and time.monotonic() < deadline:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        try:
            message = consumer.receive(500)
        except pulsar.Timeout:
            continue
        got.append((message.data(), message.properties(), message.publish_timestamp(), int(time.time() * 1000)))
        consumer.acknowledge(message)


def was_held(received: tuple) -> bool:
    value, properties, *_rest = received
    return value != b"m5" and ("deliverAt" in properties or "at" in properties)


def test_never_early_and_exactly_once_across_a_restart(spark, broker, tmp_path):
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe("dd-out", "check")
        producer = client.create_producer("dd-in")
        now = int(time.time() * 1000)
        sent = {}
        for i in range(24):
            properties = {"n": str(i)}
            if i % 6:  # most wait 2..13.5 s; every sixth has no deliver time and goes straight through
                properties["deliverAt"] = str(now + 2000 + i * 500)
            if i == 5:
                properties["deliverAt"] = str(now - 60_000)  # already due: straight through
            if i % 6 == 3:  # MessageMetadata's deliver_at_time instead of the property
                at = int(properties.pop("deliverAt"))
                producer.send(f"m{i}".encode(), properties={**properties, "at": str(at)}, partition_key=f"k{i % 4}",
                              deliver_at=at)
                properties = {**properties, "at": str(at)}
            else:
                producer.send(f"m{i}".encode(), properties=properties, partition_key=f"k{i % 4}")
            sent[f"m{i}".encode()] = properties
        checkpoint = str(tmp_path / "checkpoint")
        deadline = time.monotonic() + DEADLINE_SECONDS
        query = delayed_dispatch(spark, "dd-in", "dd-out", service_url=broker.url, checkpoint_location=checkpoint,
                                 deliver_at_property="deliverAt")
        got: list = []
        try:
            # until a first delayed message is out: the rest are pending in the query's state
            while not any(was_held(g) for g in got) and time.monotonic() < deadline:
                receive_until(consumer, got, len(got) + 1, min(deadline, time.monotonic() + 1), query)
        finally:
            query.stop()
        assert len(got) < len(sent), "everything came out before the restart: make the delays longer"
        query = delayed_dispatch(spark, "dd-in", "dd-out", service_url=broker.url, checkpoint_location=checkpoint,
                                 deliver_at_property="deliverAt")
        try:
            receive_until(consumer, got, len(sent), deadline, query)
            receive_until(consumer, got, len(sent) + 1, time.monotonic() + 3, query)  # anything extra?
        finally:
            query.stop()
    finally:
        client.close()
    counts = Counter(value for value, *_rest in got)
    duplicated = [value for value, count in counts.items() if count > 1]
    assert counts == Counter(list(sent)), f"lost {set(sent) - set(counts)}, duplicated {duplicated}"
    for value, properties, published, received in got:
        assert properties == sent[value]
        deliver_at = int(properties.get("deliverAt", properties.get("at", 0)))
        assert published >= deliver_at and received >= deliver_at, (value, deliver_at, published)


def test_deliver_at_column_holds_deliver_at_time(spark, broker):
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer("dd-column")
        at = 1_900_000_000_123
        producer.send(b"later", deliver_at=at)
        producer.send(b"now")
    finally:
        client.close()
    rows = (spark.read.format("magnetar").option("service.url", broker.url).option("topic", "dd-column").load()
            .selectExpr("value", "unix_millis(deliver_at) AS at").collect())
    assert {bytes(row.value): row.at for row in rows} == {b"later": at, b"now": None}
