"""One race per Kafka client: a group consumer (auto.offset.reset=earliest) subscribes to an empty topic,
and `delay` seconds later a producer of the same client sends `count` keyed records to it.

Each function returns the distinct values the consumer received before `timeout`. A module of
its own (not conftest.py) so test files import it by name; kafkajs runs tests/kafka/js/race.js,
which .ci/run installs (`npm install --prefix tests/kafka/js --no-package-lock`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

JS = Path(__file__).parent / "js"
INSTALL_KAFKAJS = "kafkajs is missing: npm install --prefix tests/kafka/js --no-package-lock"
Race = Callable[[str, str, str, int, float, float], int]


def _values(count: int) -> list[tuple[bytes, bytes]]:
    return [(b"k%d" % i, b"v%d" % i) for i in range(count)]


def _after(delay: float, produce: Callable[[], None]) -> threading.Thread:
    """`produce` in a thread of its own, `delay` seconds from now: the consumer is already starting."""
    def run() -> None:
        time.sleep(delay)  # the race's random head start, not a synchronisation
        produce()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def librdkafka(bootstrap: str, topic: str, group: str, count: int, delay: float, timeout: float) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        for key, value in _values(count):
            producer.produce(topic, key=key, value=value)
            producer.poll(0)
        producer.flush(timeout)

    thread = _after(delay, produce)
    received: set[bytes] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(received) < count and time.monotonic() < deadline:
            for message in consumer.consume(count, timeout=0.2):
                if message.error() is None:
                    received.add(message.value())
    finally:
        consumer.close()
        thread.join(timeout)
    return len(received)


def kafka_python(bootstrap: str, topic: str, group: str, count: int, delay: float, timeout: float) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest")
    # the topic's metadata first: kafka-python 3.0 may stall for good after a first join made
    # without it (its rejoin's SyncGroup answer is never acted on), whatever the broker
    assert consumer.partitions_for_topic(topic)
    consumer.subscribe([topic])

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        for key, value in _values(count):
            producer.send(topic, key=key, value=value)
        producer.flush(timeout)
        producer.close()

    thread = _after(delay, produce)
    received: set[bytes] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(received) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                received.update(record.value for record in records)
    finally:
        consumer.close()
        thread.join(timeout)
    return len(received)


def aiokafka(bootstrap: str, topic: str, group: str, count: int, delay: float, timeout: float) -> int:
    async def produce() -> None:
        await asyncio.sleep(delay)  # the race's random head start
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for key, value in _values(count):
                await producer.send(topic, key=key, value=value)
            await producer.flush()
        finally:
            await producer.stop()

    async def run() -> int:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest")
        await consumer.start()
        producing = asyncio.create_task(produce())
        received: set[bytes] = set()
        deadline = time.monotonic() + timeout
        try:
            while len(received) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    received.update(record.value for record in records)
        finally:
            await consumer.stop()
            await producing
        return len(received)

    return asyncio.run(run())


def kafkajs(bootstrap: str, topic: str, group: str, count: int, delay: float, timeout: float) -> int:
    assert (JS / "node_modules" / "kafkajs").is_dir(), INSTALL_KAFKAJS
    out = subprocess.run(["node", str(JS / "race.js"), bootstrap, topic, group, str(count), str(int(delay * 1000)),
                          str(int(timeout * 1000))], check=True, capture_output=True, text=True, timeout=timeout + 30)
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    assert "error" not in answer, answer
    return int(answer["received"])


def kcat(bootstrap: str, topic: str, group: str, count: int, delay: float, timeout: float) -> int:
    consumer = subprocess.Popen(["kcat", "-C", "-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest",
                                 "-c", str(count), "-f", "%s\n", "-q", "-u", topic],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def produce() -> None:
        lines = "".join(f"{key.decode()}:{value.decode()}\n" for key, value in _values(count))
        subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-K", ":"], input=lines, text=True,
                       check=True, timeout=timeout, capture_output=True)

    thread = _after(delay, produce)
    try:
        out, _ = consumer.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        consumer.terminate()  # kcat stops cleanly on SIGTERM, its lines printed
        out, _ = consumer.communicate(timeout=30)
    thread.join(timeout)
    return len(set(out.split()))


CLIENTS: dict[str, Race] = {"librdkafka": librdkafka, "kafka-python": kafka_python, "aiokafka": aiokafka,
                            "kafkajs": kafkajs, "kcat": kcat}
