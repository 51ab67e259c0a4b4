"""SIGKILL in the middle of Kafka traffic: no acknowledged record is lost, committed offsets stay,
and group members (whose membership was the broker's memory) are sent to rejoin."""

from __future__ import annotations

import datetime
import signal
import threading

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_brokers import RawKafka, start_kafka_broker
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4 import request as heartbeat
from kio.schema.join_group.v7 import request as join_group
from kio.schema.sync_group.v5 import request as sync_group
from polling import wait_for


def _join(raw: RawKafka, group: str) -> tuple[str, int]:
    """(member id, generation) of a member that joined `group` alone and synced."""
    member_id = ""
    for _ in range(2):  # the first join names the member id (MEMBER_ID_REQUIRED)
        joined = raw.call(11, 7, join_group.JoinGroupRequest(
            group_id=group, session_timeout=datetime.timedelta(seconds=30),
            rebalance_timeout=datetime.timedelta(seconds=5), member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocols=(join_group.JoinGroupRequestProtocol(name="range", metadata=b""),)))
        member_id = joined.member_id
    assert joined.error_code == ErrorCode.none
    synced = raw.call(14, 5, sync_group.SyncGroupRequest(
        group_id=group, generation_id=joined.generation_id, member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range",
        assignments=(sync_group.SyncGroupRequestAssignment(member_id=member_id, assignment=b""),)))
    assert synced.error_code == ErrorCode.none
    return member_id, joined.generation_id


def _served(consumer: Consumer) -> bool:
    """One poll, which runs the consumer's rebalance callbacks."""
    consumer.poll(0.1)
    return True


def _heartbeat(raw: RawKafka, group: str, member: tuple[str, int]) -> ErrorCode:
    return raw.call(12, 4, heartbeat.HeartbeatRequest(group_id=group, generation_id=member[1], member_id=member[0],
                                                      group_instance_id=None)).error_code


def _consume_from_start(bootstrap: str, topic: str, seen: dict[int, bytes], stop: threading.Event) -> None:
    """What a consumer reading along sees before the crash: (offset -> value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "along", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    while not stop.is_set():
        for message in consumer.consume(500, timeout=0.1):
            if message.error() is None:
                seen[message.offset()] = message.value()
    consumer.close()


@pytest.mark.parametrize("entry_format", ["kafka", "pulsar"])
def test_sigkill_loses_no_acknowledged_record_and_keeps_committed_offsets(tmp_path, entry_format) -> None:
    """A producer and a consumer reading along when the broker is SIGKILLed: every acknowledged
    record is there after the restart, and so is every record the consumer saw (a high
    watermark of durable data only: nothing read can vanish)."""
    broker = start_kafka_broker(tmp_path / "data", f"entryFormat={entry_format}")
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
        seen: dict[int, bytes] = {}
        reader = threading.Thread(target=_consume_from_start, args=(broker.bootstrap, topic, seen, stop), daemon=True)
        assert wait_for(lambda: len(delivered) >= 1, timeout=60)
        reader.start()
        assert wait_for(lambda: len(delivered) >= 3000 and len(seen) >= 1000, timeout=60)
        raw = RawKafka(broker.bootstrap)
        member = _join(raw, "members")
        assert _heartbeat(raw, "members", member) == ErrorCode.none
        raw.close()
        assignments: list[object] = []
        rejoining = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rejoining",
                              "heartbeat.interval.ms": 200, "session.timeout.ms": 6000})
        rejoining.subscribe([topic], on_assign=lambda _c, partitions: assignments.append(partitions))
        assert wait_for(lambda: _served(rejoining) and len(assignments) == 1, timeout=30)
        committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        committer.commit(offsets=[TopicPartition(topic, 0, 1234)], asynchronous=False)
        broker.stop(signal.SIGKILL)  # at once: the commit was answered, so it is on disk
        committer.close()
        stop.set()
        thread.join(30)
        reader.join(30)
        producer.flush(6)  # what was in flight fails: only delivered records count

        broker.start()
        raw = RawKafka(broker.bootstrap)
        assert _heartbeat(raw, "members", member) == ErrorCode.unknown_member_id  # so the member rejoins
        raw.close()
        assert wait_for(lambda: _served(rejoining) and len(assignments) == 2, timeout=30)  # it rejoined
        rejoining.close()
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
        assert seen and all(stored[offset] == value for offset, value in seen.items())
    finally:
        broker.stop()
