"""Consumer groups through real clients: rebalances as members come and go, commits kept as
subscription cursors, and Kafka's admin calls."""

from __future__ import annotations

import json
import random
import threading
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka import KafkaConsumer
from kafka_brokers import start_kafka_broker
from polling import wait_for


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    started = start_kafka_broker(tmp_path_factory.mktemp("groups"))
    yield started
    started.stop()


def _create(broker, partitions: int) -> str:
    topic = f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(timeout=30)
    return topic


def _produce(broker, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=f"key-{random.randrange(1000)}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0


def _member(broker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "heartbeat.interval.ms": 300, "session.timeout.ms": 6000})


CLOSE_DEADLINE = 60.0
"""Seconds a member's close may take. librdkafka's close leaves the group and waits for the
answer; a LeaveGroup behind a JoinGroup the coordinator holds for a rebalance waits with it
(as on a Kafka broker: a connection's requests are answered in order) until librdkafka gives up
on it, about 5 s. A close blocked in C is out of reach of pytest-timeout's signal, so it runs in
a thread and a close past the deadline fails the test instead of hanging the run."""


def _close(member: Consumer) -> None:
    closing = threading.Thread(target=member.close, daemon=True)
    closing.start()
    closing.join(CLOSE_DEADLINE)
    assert not closing.is_alive(), f"a member's close() did not return within {CLOSE_DEADLINE:.0f} s"


def _consume_and_commit(member: Consumer, seen: set[tuple[int, int]], timeout: float) -> None:
    """What a member's poll returns, noted as (partition, offset), then committed."""
    messages = member.consume(100, timeout=timeout)
    for message in messages:
        assert message.error() is None, message.error()
        seen.add((message.partition(), message.offset()))
    if messages:
        member.commit(asynchronous=False)


def test_members_rebalance_and_commits_survive_as_subscription_cursors(broker) -> None:
    topic, group = _create(broker, 3), f"group-{uuid.uuid4().hex[:6]}"
    _produce(broker, topic, 300)
    first, second = _member(broker, group), _member(broker, group)
    seen: set[tuple[int, int]] = set()

    def consume(member: Consumer) -> None:
        _consume_and_commit(member, seen, timeout=0.2)

    first.subscribe([topic])
    assert wait_for(lambda: consume(first) or len(seen) >= 60, timeout=30)
    second.subscribe([topic])

    def both_assigned() -> bool:
        consume(first)
        consume(second)
        return bool(first.assignment()) and bool(second.assignment()) and len(seen) == 300

    assert wait_for(both_assigned, timeout=60), (len(seen), first.assignment(), second.assignment())
    split = [{tp.partition for tp in member.assignment()} for member in (first, second)]
    assert split[0].isdisjoint(split[1]) and split[0] | split[1] == {0, 1, 2}
    _close(first)
    assert wait_for(lambda: consume(second) or len(second.assignment()) == 3, timeout=30)
    _close(second)

    checker = _member(broker, group)
    committed = checker.committed([TopicPartition(topic, p) for p in range(3)], timeout=10)
    ends = [checker.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(3)]
    assert [tp.offset for tp in committed] == ends and sum(ends) == 300
    _close(checker)
    for partition in range(3):
        stats = json.load(urllib.request.urlopen(
            f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}-partition-{partition}/stats"))
        assert stats["subscriptions"][group]["msgBacklog"] == 0


def test_a_late_member_of_a_committed_group_resumes_where_the_group_left_off(broker) -> None:
    topic, group = _create(broker, 1), f"group-{uuid.uuid4().hex[:6]}"
    _produce(broker, topic, 20)
    member = _member(broker, group)
    member.subscribe([topic])
    got: list = []
    assert wait_for(lambda: got.extend(member.consume(20 - len(got), timeout=0.2)) or len(got) >= 20, timeout=30)
    member.commit(message=got[9], asynchronous=False)  # up to offset 9: the next is 10
    _close(member)
    _produce(broker, topic, 5)
    late = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                         consumer_timeout_ms=20000)
    values = []
    for message in late:
        values.append(int(message.value))
        if len(values) == 15:
            break
    late.close()
    assert values == list(range(10, 20)) + list(range(5))


def test_admin_calls_create_describe_and_delete_topics(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _create(broker, 2)
    again = admin.create_topics([NewTopic(topic, 2)])[topic]
    with pytest.raises(Exception) as caught:
        again.result(timeout=30)
    assert caught.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    (config,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    assert config.result(timeout=30)["max.message.bytes"].value == str(5 * 1024 * 1024)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2
    admin.delete_topics([topic])[topic].result(timeout=30)
    assert topic not in admin.list_topics(timeout=10).topics
    groups = admin.list_consumer_groups().result(timeout=30)
    assert isinstance(groups.valid, list)


def test_random_churn_settles_on_a_disjoint_covering_assignment_and_loses_nothing(broker) -> None:
    """Members join and leave at random while records arrive; every record is consumed by
    someone, and the members left share the partitions exactly."""
    rng = random.Random()
    partitions = rng.randint(3, 6)
    topic, group = _create(broker, partitions), f"group-{uuid.uuid4().hex[:6]}"
    members: list[Consumer] = []
    seen: set[tuple[int, int]] = set()
    produced = 0

    def consume_all() -> None:
        for member in members:
            _consume_and_commit(member, seen, timeout=0.05)

    for _ in range(rng.randint(4, 7)):
        if members and (len(members) >= 3 or rng.random() < 0.35):
            _close(members.pop(rng.randrange(len(members))))
        else:
            members.append(_member(broker, group))
            members[-1].subscribe([topic])
        count = rng.randint(20, 80)
        _produce(broker, topic, count)
        produced += count
        consume_all()
    if not members:
        members.append(_member(broker, group))
        members[-1].subscribe([topic])

    def settled() -> bool:
        consume_all()
        owned = [{tp.partition for tp in m.assignment()} for m in members]
        covering = sorted(p for parts in owned for p in parts) == list(range(partitions))
        return covering and len(seen) == produced

    assert wait_for(settled, timeout=90), (len(seen), produced, [m.assignment() for m in members])
    for member in members:
        _close(member)
