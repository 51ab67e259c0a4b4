"""Non-persistent topics through a real standalone, with the official client.

What is checked is what Pulsar promises for them: messages reach the consumers
connected when they are published and nobody else, a consumer without permits
loses messages instead of slowing anyone down (and the loss shows in stats),
nothing reaches the data directory, and the domain decides what a regex
subscription and GET_TOPICS_OF_NAMESPACE see.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path

import _pulsar
import crc32c
import pulsar
import pytest
from admin_http import http as admin_request
from polling import wait_for
from rawclient import RawClient

from magnetar.broker.transport.topic_list import compile_pattern, filter_topics, topics_hash
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
Mode = pb.CommandGetTopicsOfNamespace
NP = "non-persistent://public/default/"
DEADLINE = 15.0


# -- helpers
def http(broker, method: str, path: str, body: bytes | None = None) -> tuple[int, object]:
    """(status, decoded JSON body or None) of an admin call."""
    status, _, raw = admin_request(method, f"{broker.admin_url}{path}", body)
    return status, json.loads(raw) if raw and status < 300 else None


def stats(broker, local: str) -> dict:
    status, body = http(broker, "GET", f"/admin/v2/non-persistent/public/default/{local}/stats")
    assert status == 200, f"stats of {local}: HTTP {status}"
    return body  # type: ignore[return-value]


def listed(broker) -> list[str]:
    status, body = http(broker, "GET", "/admin/v2/non-persistent/public/default")
    assert status == 200
    return body  # type: ignore[return-value]


def receive(consumer, count: int) -> list[pulsar.Message]:
    return [consumer.receive(timeout_millis=int(DEADLINE * 1000)) for _ in range(count)]


def receive_spread(consumers: dict, expected: int) -> dict[str, list[pulsar.Message]]:
    """Poll every consumer until `expected` messages arrived in total, or the deadline."""
    got: dict[str, list[pulsar.Message]] = defaultdict(list)
    end = time.monotonic() + DEADLINE
    total = 0
    while total < expected and time.monotonic() < end:
        for name, consumer in consumers.items():
            try:
                msg = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            got[name].append(msg)
            total += 1
    return got


# -- producing and consuming
@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_round_trip(client, batching):
    topic = f"{NP}rt-{batching}"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=batching, batching_max_messages=50)
    payloads = [f"message-{i}".encode() for i in range(200)]
    for i, payload in enumerate(payloads):
        producer.send_async(payload, None, properties={"i": str(i)}, partition_key=f"k{i % 5}")
    producer.flush()
    received = receive(consumer, len(payloads))
    assert [m.data() for m in received] == payloads
    assert [m.properties()["i"] for m in received] == [str(i) for i in range(200)]
    assert [m.partition_key() for m in received] == [f"k{i % 5}" for i in range(200)]
    assert {m.topic_name() for m in received} == {topic}
    # Pulsar gives every non-persistent message the id 0:0; batches still number their messages.
    assert {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in received} == {(0, 0)}
    if batching:
        assert any(m.message_id().batch_index() > 0 for m in received)
    else:
        assert {m.message_id().batch_index() for m in received} == {-1}
    sent = producer.send(b"one more")
    assert (sent.ledger_id(), sent.entry_id()) == (0, 0)
    assert consumer.receive(timeout_millis=10000).data() == b"one more"


def test_consumer_gets_nothing_published_before_it_subscribed(client):
    topic = f"{NP}late"
    early = client.subscribe(topic, "early")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"before-{i}".encode())
    assert [m.data() for m in receive(early, 5)] == [f"before-{i}".encode() for i in range(5)]
    late = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    producer.send(b"after")
    assert late.receive(timeout_millis=10000).data() == b"after"
    assert reader.read_next(timeout_millis=10000).data() == b"after"
    assert early.receive(timeout_millis=10000).data() == b"after"


def test_producer_access_modes_and_names_as_on_persistent_topics(client):
    topic = f"{NP}access"
    holder = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive, producer_name="alice")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    holder.close()
    client.create_producer(topic, producer_name="alice").send(b"mine now")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="alice")


# -- subscription types
def test_shared_spreads_messages_over_consumers(client):
    topic = f"{NP}shared"
    consumers = {name: client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, consumer_name=name)
                 for name in ("a", "b")}
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(100):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    got = receive_spread(consumers, 100)
    assert sorted(m.data() for msgs in got.values() for m in msgs) == sorted(f"m{i}".encode() for i in range(100))
    assert len(got["a"]) > 0 and len(got["b"]) > 0


def test_failover_delivers_to_the_active_consumer_and_switches_on_close(client):
    topic = f"{NP}failover"
    a = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    b = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"m{i}".encode())
    got = receive_spread({"a": a, "b": b}, 20)
    assert [m.data() for m in got["a"]] == [f"m{i}".encode() for i in range(20)]
    assert "b" not in got
    a.close()
    producer.send(b"after-switch")
    # Nothing is redelivered on a non-persistent topic: the standby starts with what comes next.
    assert b.receive(timeout_millis=10000).data() == b"after-switch"


def test_exclusive_refuses_a_second_consumer_and_other_types(client):
    topic = f"{NP}exclusive"
    client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)


def test_key_shared_keeps_each_key_on_one_consumer_in_order(client):
    topic = f"{NP}key-shared"
    consumers = {name: client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=name)
                 for name in ("a", "b", "c")}
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{k}" for k in range(12)]
    for i in range(240):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % len(keys)])
    producer.flush()
    got = receive_spread(consumers, 240)
    owners: dict[str, set[str]] = defaultdict(set)
    per_key: dict[str, list[int]] = defaultdict(list)
    for name, msgs in got.items():
        for m in msgs:
            owners[m.partition_key()].add(name)
            per_key[m.partition_key()].append(int(m.data()))
    assert sum(len(v) for v in per_key.values()) == 240
    assert all(len(o) == 1 for o in owners.values()), owners
    assert all(seq == sorted(seq) for seq in per_key.values())
    assert len({next(iter(o)) for o in owners.values()}) > 1


# -- flow control: drop, don't stall
def test_slow_consumer_loses_messages_and_stalls_nobody(broker_factory, client_factory):
    # Rates are worked out every statsUpdateFrequencyInSecs; 2 s keeps one interval's rate
    # on show long enough to be read.
    broker = broker_factory("statsUpdateFrequencyInSecs=2")
    client = client_factory(broker.url)
    topic = "slow"
    slow = client.subscribe(NP + topic, "slow", receiver_queue_size=5)
    fast = client.subscribe(NP + topic, "fast")
    producer = client.create_producer(NP + topic, batching_enabled=False)
    for i in range(200):
        producer.send_async(f"{i}".encode(), None)
    producer.flush()  # every receipt came back although `slow` stopped taking messages
    assert [m.data() for m in receive(fast, 200)] == [f"{i}".encode() for i in range(200)]
    subscriptions = stats(broker, topic)["subscriptions"]
    assert subscriptions["slow"]["msgOutCounter"] == 5  # its 5 permits
    assert subscriptions["slow"]["msgDropCounter"] == 195
    assert subscriptions["slow"]["msgBacklog"] == 0  # dropped is gone, not waiting
    assert subscriptions["fast"]["msgDropCounter"] == 0
    assert subscriptions["fast"]["msgOutCounter"] == 200
    assert wait_for(lambda: stats(broker, topic)["subscriptions"]["slow"]["msgDropRate"] > 0)
    assert stats(broker, topic)["subscriptions"]["fast"]["msgDropRate"] == 0
    # The five it had permits for are all it ever gets of those 200.
    assert [m.data() for m in receive(slow, 5)] == [f"{i}".encode() for i in range(5)]
    producer.send(b"next")
    assert slow.receive(timeout_millis=10000).data() == b"next"


# -- no storage
def test_nothing_is_stored_and_a_restart_forgets_the_topic(broker_factory, client_factory):
    broker = broker_factory()
    name = "np-never-written-7f3a"
    client = client_factory(broker.url)
    consumer = client.subscribe(NP + name, "durable-sub")
    producer = client.create_producer(NP + name, batching_enabled=False)
    for i in range(50):
        producer.send(f"{i}".encode())
    assert len(receive(consumer, 50)) == 50
    assert stats(broker, name)["msgInCounter"] == 50
    assert stats(broker, name)["msgOutCounter"] == 50
    assert NP + name in listed(broker)
    client.close()
    broker.stop()
    data_dir = Path(broker.data_dir)
    files = [path for path in data_dir.rglob("*") if path.is_file()]
    assert files, "the data dir should hold the broker's own files"
    assert not [path for path in files if name in str(path) or name.encode() in path.read_bytes()]
    broker.start()
    assert http(broker, "GET", f"/admin/v2/non-persistent/public/default/{name}/stats")[0] == 404
    assert NP + name not in listed(broker)


# -- regex subscriptions and the topic list
REGEX_MODES = {
    "PersistentOnly": (pulsar.RegexSubscriptionMode.PersistentOnly, {"persistent://public/default/rx-p"}),
    "NonPersistentOnly": (pulsar.RegexSubscriptionMode.NonPersistentOnly, {f"{NP}rx-n"}),
    "AllTopics": (pulsar.RegexSubscriptionMode.AllTopics, {"persistent://public/default/rx-p", f"{NP}rx-n"}),
}


@pytest.mark.parametrize("mode_name", list(REGEX_MODES))
def test_regex_subscription_mode_picks_the_domain(broker, client, mode_name):
    mode, expected = REGEX_MODES[mode_name]
    producers = {
        "persistent://public/default/rx-p": client.create_producer("persistent://public/default/rx-p"),
        f"{NP}rx-n": client.create_producer(f"{NP}rx-n"),
        f"{NP}other-n": client.create_producer(f"{NP}other-n"),  # active, but the pattern leaves it out
    }
    consumer = client.subscribe(re.compile("public/default/rx-.*"), "rx", regex_subscription_mode=mode)
    for topic, producer in producers.items():
        producer.send(topic.encode())
    got = receive(consumer, len(expected))
    assert {m.topic_name() for m in got} == expected
    assert {m.data().decode() for m in got} == expected
    assert ("rx" in stats(broker, "rx-n")["subscriptions"]) == (f"{NP}rx-n" in expected)
    assert "rx" not in stats(broker, "other-n")["subscriptions"]
    status, persistent_stats = http(broker, "GET", "/admin/v2/persistent/public/default/rx-p/stats")
    assert status == 200
    assert ("rx" in persistent_stats["subscriptions"]) == ("persistent://public/default/rx-p" in expected)


@pytest.fixture
def discovery_period_honoured(monkeypatch):
    """pulsar-client 3.13's subscribe() takes pattern_auto_discovery_period but never hands it
    to the C++ consumer (apache/pulsar-client-python#171), which then rediscovers every 60 s.
    Here every consumer configuration gets the 1 s period the test asks for."""
    make_configuration = _pulsar.ConsumerConfiguration

    def configuration() -> _pulsar.ConsumerConfiguration:
        conf = make_configuration()
        conf.pattern_auto_discovery_period(1)
        return conf

    monkeypatch.setattr(_pulsar, "ConsumerConfiguration", configuration)


def test_pattern_auto_discovery_finds_new_non_persistent_topics(broker, client, discovery_period_honoured):
    first = client.create_producer(f"{NP}disc-a")
    consumer = client.subscribe(re.compile("public/default/disc-.*"), "disc",
                                regex_subscription_mode=pulsar.RegexSubscriptionMode.NonPersistentOnly,
                                pattern_auto_discovery_period=1)
    stored = client.create_producer("persistent://public/default/disc-p")
    stored.send(b"stored")
    second = client.create_producer(f"{NP}disc-b")
    # a non-persistent message reaches only a consumer that has asked for it (its FLOW came)
    assert wait_for(lambda: all(_has_permits(stats(broker, name), "disc") for name in ("disc-a", "disc-b"))), \
        "disc-b was not discovered"
    second.send(b"b")
    first.send(b"a")
    assert sorted(m.data() for m in receive(consumer, 2)) == [b"a", b"b"]
    status, persistent_stats = http(broker, "GET", "/admin/v2/persistent/public/default/disc-p/stats")
    assert status == 200 and "disc" not in persistent_stats["subscriptions"]


def _has_permits(topic_stats: dict, subscription: str) -> bool:
    consumers = topic_stats["subscriptions"].get(subscription, {}).get("consumers", [])
    return bool(consumers) and consumers[0]["availablePermits"] > 0


def get_topics(raw: RawClient, request_id: int, mode: int, **fields) -> pb.CommandGetTopicsOfNamespaceResponse:
    raw.command(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
        request_id=request_id, namespace="public/default", mode=mode, **fields)))
    response = raw.expect(T.GET_TOPICS_OF_NAMESPACE_RESPONSE).getTopicsOfNamespaceResponse
    assert response.request_id == request_id
    return response


def pulsar_topics_hash(topics: list[str]) -> str:
    """TopicList.calculateHash: Guava's crc32c over the sorted names joined by ',',
    printed as the hash's bytes, least significant first."""
    return crc32c.crc32c(",".join(sorted(topics)).encode()).to_bytes(4, "little").hex()


def test_topics_of_namespace_by_mode_pattern_and_hash(broker, client):
    client.create_producer("persistent://public/default/wire-p").send(b"stored")
    live = client.create_producer(f"{NP}wire-n")
    idle = client.create_producer(f"{NP}wire-idle")
    idle.close()  # loaded once, but with no producer, consumer or subscription left: not listed
    raw = RawClient(broker.url)
    try:
        raw.connect()
        persistent = get_topics(raw, 1, Mode.PERSISTENT)
        assert list(persistent.topics) == ["persistent://public/default/wire-p"]
        non_persistent = get_topics(raw, 2, Mode.NON_PERSISTENT)
        assert list(non_persistent.topics) == [f"{NP}wire-n"]
        everything = get_topics(raw, 3, Mode.ALL)
        assert sorted(everything.topics) == [f"{NP}wire-n", "persistent://public/default/wire-p"]
        assert everything.topics_hash == pulsar_topics_hash(list(everything.topics))
        assert everything.changed and not everything.filtered
        unchanged = get_topics(raw, 4, Mode.ALL, topics_hash=everything.topics_hash)
        assert not unchanged.changed and list(unchanged.topics) == []
        matched = get_topics(raw, 5, Mode.ALL, topics_pattern="public/default/wire-n.*")
        assert matched.filtered and list(matched.topics) == [f"{NP}wire-n"]
        live.close()
        assert list(get_topics(raw, 6, Mode.NON_PERSISTENT).topics) == []
    finally:
        raw.close()


# -- readers, seek, last message id
def test_reader_seek_and_has_message_available(broker, client):
    topic = f"{NP}reader"
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"before")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    producer.send(b"first")
    assert reader.read_next(timeout_millis=10000).data() == b"first"
    # Pulsar has no last message id for a non-persistent topic: the request fails...
    with pytest.raises(pulsar.UnknownError):
        reader.has_message_available()
    # ...and a seek succeeds without replaying anything, there being nothing to replay.
    reader.seek(pulsar.MessageId.earliest)
    producer.send(b"second")
    assert reader.read_next(timeout_millis=10000).data() == b"second"
    reader_subscriptions = set(stats(broker, "reader")["subscriptions"])
    assert len(reader_subscriptions) == 1
    reader.close()
    assert stats(broker, "reader")["subscriptions"] == {}  # a reader's subscription goes with it


def test_durable_subscription_outlives_its_consumer_and_keeps_the_topic_listed(broker, client):
    topic = "outlives"
    consumer = client.subscribe(NP + topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(NP + topic)
    producer.send(b"x")
    assert consumer.receive(timeout_millis=10000).data() == b"x"
    body = stats(broker, topic)
    assert body["msgInCounter"] == 1 and body["storageSize"] == 0
    assert [p["producerName"] for p in body["publishers"]] == [producer.producer_name()]
    sub = body["subscriptions"]["sub"]
    assert sub["type"] == "Shared" and sub["msgBacklog"] == 0 and len(sub["consumers"]) == 1
    consumer.close()
    producer.close()
    assert stats(broker, topic)["subscriptions"]["sub"]["consumers"] == []
    assert NP + topic in listed(broker)
    client.subscribe(NP + topic, "sub", consumer_type=pulsar.ConsumerType.Shared).unsubscribe()
    assert NP + topic not in listed(broker)


# -- partitioned non-persistent topics
def test_auto_created_partitioned_topic_round_trip(broker_factory, client_factory):
    broker = broker_factory("allowAutoTopicCreationType=partitioned", "defaultNumPartitions=3")
    client = client_factory(broker.url)
    topic = f"{NP}parted"
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"{i}".encode(), partition_key=f"key-{i}") for i in range(60)]
    assert {mid.partition() for mid in ids} == {0, 1, 2}
    assert {(mid.ledger_id(), mid.entry_id()) for mid in ids} == {(0, 0)}
    got = receive(consumer, 60)
    assert sorted(int(m.data()) for m in got) == list(range(60))
    assert {m.topic_name() for m in got} == {f"{topic}-partition-{i}" for i in range(3)}
    assert set(listed(broker)) == {f"{topic}-partition-{i}" for i in range(3)}


def test_admin_created_partitioned_topic_keeps_only_its_partition_count(broker_factory, client_factory):
    broker = broker_factory()
    path = "/admin/v2/non-persistent/public/default/admin-parted/partitions"
    assert http(broker, "PUT", path, b"2")[0] == 204
    assert http(broker, "PUT", path, b"2")[0] == 409
    assert http(broker, "GET", path) == (200, {"partitions": 2})
    client = client_factory(broker.url)
    topic = f"{NP}admin-parted"
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-0", f"{topic}-partition-1"]
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"{i}".encode(), partition_key=str(i))
    assert sorted(int(m.data()) for m in receive(consumer, 10)) == list(range(10))
    client.close()
    broker.restart()
    assert http(broker, "GET", path) == (200, {"partitions": 2})  # the count is stored, like a persistent one's
    assert listed(broker) == []  # its partitions are not: nothing is loaded, nothing is active
    assert http(broker, "GET", "/admin/v2/persistent/public/default")[1] == []


def test_disabled_non_persistent_topics_are_refused(broker_factory, client_factory):
    broker = broker_factory("enableNonPersistentTopics=false")
    client = client_factory(broker.url)
    with pytest.raises(pulsar.NotAllowedError):
        client.create_producer(f"{NP}refused")
    client.create_producer("persistent://public/default/still-fine").send(b"ok")


# -- the pieces underneath, without a broker
def test_topic_list_matches_like_pulsar():
    names = [f"{NP}a-partition-0", f"{NP}a-partition-1", "persistent://public/default/ab", f"{NP}b"]
    # Scheme-less and partition-less, whichever way the pattern is spelled; a full match.
    assert filter_topics(names, compile_pattern("public/default/a.*")) == names[:3]
    assert filter_topics(names, compile_pattern("persistent://public/default/a")) == names[:2]
    assert compile_pattern("public/default/(") is None
    assert compile_pattern(r"public/default/(a)\1") is None  # RE2 cannot: the client filters
    assert topics_hash(["b", "a"]) == topics_hash(["a", "b"]) == pulsar_topics_hash(["a", "b"])
    assert topics_hash([]) == "00000000"
