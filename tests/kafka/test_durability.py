"""SIGKILL in the middle of Kafka traffic: no acknowledged record is lost, committed offsets stay."""

from __future__ import annotations

import signal
import threading

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_brokers import start_kafka_broker
from polling import wait_for


def test_sigkill_loses_no_acknowledged_record_and_keeps_committed_offsets(tmp_path) -> None:
    broker = start_kafka_broker(tmp_path / "data", "entryFormat=kafka")
    try:
        topic, group = "durable", "keeper"
        delivered: dict[int, bytes] = {}
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "acks": "all",
                             "enable.idempotence": True, "message.timeout.ms": 5000})

        def on_delivery(err, message) -> None:
            if err is None:
                delivered[message.offset()] = message.value()

        stop = threading.Event()

        def produce() -> None:
            sent = 0
            while not stop.is_set():
                producer.produce(topic, value=b"value-%d" % sent, on_delivery=on_delivery)
                sent += 1
                producer.poll(0 if sent % 100 else 0.01)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        assert wait_for(lambda: len(delivered) >= 3000, timeout=60)
        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        committer.commit(offsets=[TopicPartition(topic, 0, 1234)], asynchronous=False)
        broker.stop(signal.SIGKILL)  # at once: the commit was answered, so it is on disk
        committer.close()
        stop.set()
        thread.join(30)
        producer.flush(6)  # what was in flight fails: only delivered records count

        broker.start()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert committed.offset == 1234
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        assert end >= max(delivered) + 1
        consumer.assign([TopicPartition(topic, 0, 0)])
        stored: dict[int, bytes] = {}

        def read_all() -> bool:
            for message in consumer.consume(1000, timeout=0.2):
                assert message.error() is None, message.error()
                stored[message.offset()] = message.value()
            return len(stored) >= end

        assert wait_for(read_all, timeout=60)
        consumer.close()
        assert sorted(stored) == list(range(end))
        assert all(stored[offset] == value for offset, value in delivered.items())
    finally:
        broker.stop()
