"""read_committed consumers of each Kafka client library, reading partition 0 of a topic from
the start: confluent-kafka (librdkafka), kafka-python, aiokafka and kafkajs (Node.js, which .ci/run
installs). Each returns the values it got: `count` of them, then until a poll brings nothing
more (extras show), or TIMEOUT. A module of its own: test files import it by name.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from racing_clients import INSTALL_KAFKAJS, JS

TIMEOUT = 20.0


def confluent(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return _until(count, lambda: [m.value() for m in consumer.consume(100, 0.5) if not m.error()], consumer.close)


def kafka_python(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    consumer.assign([KpTopicPartition(topic, 0)])
    consumer.seek_to_beginning()

    def poll() -> list[bytes]:
        return [r.value for records in consumer.poll(timeout_ms=500).values() for r in records]

    return _until(count, poll, consumer.close)


def aiokafka(bootstrap: str, topic: str, count: int) -> list[bytes]:
    async def run() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    isolation_level="read_committed", auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                values = [r.value for records in batch.values() for r in records]
                got += values
                if not values and len(got) >= count:
                    break
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def kafkajs(bootstrap: str, topic: str, count: int) -> list[bytes]:
    assert (JS / "node_modules" / "kafkajs").is_dir(), INSTALL_KAFKAJS
    out = subprocess.run(["node", str(JS / "read_committed.js"), bootstrap, topic, str(count),
                          str(int(TIMEOUT * 1000))], capture_output=True, text=True, timeout=TIMEOUT + 30, check=True)
    return [value.encode() for value in json.loads(out.stdout.strip().splitlines()[-1])["values"]]


READERS = [confluent, kafka_python, aiokafka, kafkajs]
READER_IDS = ["confluent-kafka", "kafka-python", "aiokafka", "kafkajs"]


def _until(count: int, poll: Callable[[], list[bytes]], close: Callable[[], None]) -> list[bytes]:
    """What `poll` returns until `count` values came and a poll brought nothing more, or TIMEOUT."""
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            values = poll()
            got += values
            if not values and len(got) >= count:
                break
    finally:
        close()
    return got
