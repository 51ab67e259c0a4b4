"""The shared scenario suite: each test runs with the official client and with magnetar.client.

Both clients get the same calls against the same broker and must give the same answers;
a difference is a bug in magnetar.client (or a deliberate deviation documented in
docs/client.md, which then shows here as a branch on `api.name`).
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from datetime import timedelta

import pulsar
import pytest
from admin_http import get_json, http
from polling import wait_for

import magnetar.client

EARLY = 10_000  # ms: generous receive timeout on a loaded machine


def _earliest(api):
    return api.module.InitialPosition.Earliest


def _drain(consumer, count, ack=True):
    got = []
    for _ in range(count):
        msg = consumer.receive(EARLY)
        if ack:
            consumer.acknowledge(msg)
        got.append(msg)
    return got


def _nothing_more(api, consumer, millis=300):
    with pytest.raises(api.module.Timeout):
        consumer.receive(millis)


@pytest.mark.parametrize("sub_type", ["Exclusive", "Shared", "Failover", "KeyShared"])
def test_produce_consume_each_subscription_type(api, topic, sub_type):
    client = api.client()
    consumer = client.subscribe(topic, "sub", consumer_type=getattr(api.module.ConsumerType, sub_type))
    producer = client.create_producer(topic)
    sent = [producer.send(f"m{i}".encode(), partition_key=f"k{i % 3}", properties={"i": str(i)}) for i in range(20)]
    got = _drain(consumer, 20)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(20)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(20)]
    assert [m.partition_key() for m in got] == [f"k{i % 3}" for i in range(20)]
    assert [str(m.message_id()) for m in got] == [str(i) for i in sent]
    assert all(m.topic_name() == topic for m in got)
    assert all(m.redelivery_count() == 0 for m in got)
    assert got[0].producer_name() == producer.producer_name()
    _nothing_more(api, consumer)


@pytest.mark.parametrize("codec", ["NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY"])
def test_batching_with_every_codec(api, topic, codec):
    client = api.client()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=25,
                                      batching_max_publish_delay_ms=60_000,
                                      compression_type=getattr(api.module.CompressionType, codec))
    results = []
    for i in range(100):
        producer.send_async(f"value-{i}".encode() * 3, lambda res, mid: results.append((res, mid)),
                            event_timestamp=1000 + i)
    producer.flush()
    assert len(results) == 100 and all(res == api.module.Result.Ok for res, _ in results)
    ids = [mid for _, mid in results]
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == 4  # 4 batches of 25
    assert [i.batch_index() for i in ids[:25]] == list(range(25))
    got = _drain(consumer, 100)
    assert [m.data() for m in got] == [f"value-{i}".encode() * 3 for i in range(100)]
    assert [m.event_timestamp() for m in got] == [1000 + i for i in range(100)]
    assert [str(m.message_id()) for m in got] == [str(i) for i in ids]


def test_acks_of_every_kind_survive_a_resubscribe(api, topic):
    client = api.client()
    consumer = client.subscribe(topic, "sub", initial_position=_earliest(api))
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"single-{i}".encode())
    batcher = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=20)
    for i in range(6):
        batcher.send_async(f"batched-{i}".encode(), None)
    batcher.flush()
    got = _drain(consumer, 16, ack=False)
    consumer.acknowledge_cumulative(got[4])  # single-0 .. single-4
    consumer.acknowledge(got[6])  # single-6 by message
    consumer.acknowledge(got[7].message_id())  # single-7 by id
    for msg in got[10:16]:  # the whole batch, one message at a time
        consumer.acknowledge(msg)
    consumer.close()
    again = client.subscribe(topic, "sub")
    redelivered = [again.receive(EARLY).data() for _ in range(3)]
    assert redelivered == [b"single-5", b"single-8", b"single-9"]
    _nothing_more(api, again)


def test_cumulative_ack_refused_on_shared(api, topic):
    client = api.client()
    consumer = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared)
    client.create_producer(topic).send(b"x")
    msg = consumer.receive(EARLY)
    with pytest.raises(api.module.CumulativeAcknowledgementNotAllowedError):
        consumer.acknowledge_cumulative(msg)


def test_negative_ack_redelivers_with_a_count(api, topic):
    client = api.client()
    consumer = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    producer = client.create_producer(topic)
    producer.send(b"again")
    first = consumer.receive(EARLY)
    assert first.redelivery_count() == 0
    consumer.negative_acknowledge(first)
    second = consumer.receive(EARLY)
    assert (second.data(), second.redelivery_count()) == (b"again", 1)
    consumer.acknowledge(second)
    _nothing_more(api, consumer)


def test_seek_by_id_and_by_time(api, topic):
    client = api.client()
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "sub", initial_position=_earliest(api))
    ids = [producer.send(f"{i}".encode()) for i in range(10)]
    _drain(consumer, 10)
    consumer.seek(ids[3])  # the official client is exclusive of the id itself
    assert consumer.receive(EARLY).data() == b"4"
    consumer.seek(0)  # by time: from the start
    assert consumer.receive(EARLY).data() == b"0"
    consumer.seek(int(time.time() * 1000) + 60_000)
    _nothing_more(api, consumer)


def test_readers_and_has_message_available(api, topic):
    client = api.client()
    producer = client.create_producer(topic)
    ids = [producer.send(f"{i}".encode()) for i in range(5)]
    reader = client.create_reader(topic, api.module.MessageId.earliest)
    assert reader.has_message_available()
    assert [reader.read_next(EARLY).data() for _ in range(5)] == [b"0", b"1", b"2", b"3", b"4"]
    assert not reader.has_message_available()
    producer.send(b"5")
    assert reader.has_message_available()
    assert reader.read_next(EARLY).data() == b"5"
    after = client.create_reader(topic, ids[1])
    assert after.read_next(EARLY).data() == b"2"
    inclusive = client.create_reader(topic, ids[1], start_message_id_inclusive=True)
    assert inclusive.read_next(EARLY).data() == b"1"
    latest = client.create_reader(topic, api.module.MessageId.latest)
    assert not latest.has_message_available()
    producer.send(b"6")
    assert latest.read_next(EARLY).data() == b"6"
    reader.seek(ids[2])
    assert reader.read_next(EARLY).data() == b"3"


def test_message_ids_serialize_across_clients(api, topic):
    client = api.client()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=20)
    ids = []
    for i in range(3):
        producer.send_async(f"{i}".encode(), lambda res, mid: ids.append(mid))
    producer.flush()
    for mid in ids:
        data = mid.serialize()
        ours = magnetar.client.MessageId.deserialize(data)
        theirs = pulsar.MessageId.deserialize(data)
        assert ours.serialize() == theirs.serialize() == data
        assert str(ours) == str(theirs)
    assert ids[0] < ids[1] < ids[2]


def test_partitioned_topic_with_keys_and_round_robin(api, topic, shared_broker):
    status, _, body = http("PUT", f"{shared_broker.admin_url}/admin/v2/persistent/public/default/"
                                  f"{topic.rsplit('/', 1)[1]}/partitions", b"3")
    assert status in (200, 204), body
    client = api.client()
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
    consumer = client.subscribe(topic, "sub", initial_position=_earliest(api))
    producer = client.create_producer(topic)
    keyed = [producer.send(b"k", partition_key="same-key") for _ in range(5)]
    assert len({mid.partition() for mid in keyed}) == 1
    spread = [producer.send(f"{i}".encode()) for i in range(30)]
    assert {mid.partition() for mid in spread} == {0, 1, 2}
    got = _drain(consumer, 35)
    assert sorted(m.data() for m in got) == sorted([b"k"] * 5 + [f"{i}".encode() for i in range(30)])
    assert {m.topic_name() for m in got} == {f"{topic}-partition-{i}" for i in range(3)}
    _nothing_more(api, consumer)


def test_a_partition_subscribing_again_leaves_its_siblings_queued_messages(api, topic, shared_broker):
    """One partition's consumer subscribes again (its topic unloaded, as after a broker
    restart) while the other partitions' messages wait in the shared receiver queue: those
    were sent to the siblings and are not sent again, so they must stay queued."""
    rng = random.Random()
    partitions, name = rng.randint(2, 4), topic.rsplit("/", 1)[1]
    status, _, body = http("PUT", f"{shared_broker.admin_url}/admin/v2/persistent/public/default/{name}/partitions",
                           str(partitions).encode())
    assert status in (200, 204), body
    client = api.client()
    sub_type = rng.choice(["Exclusive", "Failover", "Shared"])
    consumer = client.subscribe(topic, "sub", consumer_type=getattr(api.module.ConsumerType, sub_type),
                                initial_position=_earliest(api))
    producer = client.create_producer(topic)
    values = [f"m{i}".encode() for i in range(rng.randint(20, 120))]
    for value in values:
        producer.send_async(value, None, partition_key=f"k{rng.randrange(1000)}")
    producer.flush()
    stats = f"{shared_broker.admin_url}/admin/v2/persistent/public/default/{name}-partition-{{}}/stats"

    def sent(partition: int) -> int:
        consumers = get_json(stats.format(partition))["subscriptions"]["sub"]["consumers"]
        return sum(c["msgOutCounter"] for c in consumers)

    stored = [get_json(stats.format(p))["msgInCounter"] for p in range(partitions)]
    assert sum(stored) == len(values)
    assert wait_for(lambda: [sent(p) for p in range(partitions)] == stored, timeout=20)  # all queued now
    unloaded = rng.randrange(partitions)
    status, _, body = http("PUT", f"{shared_broker.admin_url}/admin/v2/persistent/public/default/"
                                  f"{name}-partition-{unloaded}/unload")
    assert status == 204, body
    # subscribed again once its topic reloaded: sent all again (the client empties its queue first)
    assert wait_for(lambda: get_json(stats.format(unloaded))["subscriptions"]["sub"]["consumers"]
                    and sent(unloaded) == stored[unloaded], timeout=20)
    got = []
    with contextlib.suppress(api.module.Timeout):
        while sorted(set(got)) != sorted(values):
            message = consumer.receive(5_000)
            got.append(message.data())
            consumer.acknowledge(message)
    assert sorted(set(got)) == sorted(values), (sub_type, partitions, unloaded, len(set(got)), len(values))


def test_pattern_and_multi_topic_consumers(api, topic):
    client = api.client()
    prefix = topic.rsplit("/", 1)[1]
    names = [f"persistent://public/default/{prefix}-pat-{i}" for i in range(3)]
    producers = [client.create_producer(name) for name in names]
    pattern = client.subscribe(re.compile(f"persistent://public/default/{prefix}-pat-.*"), "sub",
                               initial_position=_earliest(api))
    listed = client.subscribe(names[:2], "sub2", initial_position=_earliest(api))
    for i, producer in enumerate(producers):
        producer.send(f"{i}".encode())
    assert sorted(m.data() for m in _drain(pattern, 3)) == [b"0", b"1", b"2"]
    assert sorted(m.data() for m in _drain(listed, 2)) == [b"0", b"1"]


def test_delayed_messages_arrive_after_their_time(api, topic):
    client = api.client()
    consumer = client.subscribe(topic, "sub", consumer_type=api.module.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=True)
    start = time.time()
    producer.send(b"later", deliver_after=timedelta(milliseconds=1500))
    producer.send(b"now")
    assert consumer.receive(EARLY).data() == b"now"
    later = consumer.receive(EARLY)
    assert later.data() == b"later"
    assert time.time() - start >= 1.4


def test_broker_restart_loses_and_duplicates_nothing(api, broker_factory):
    broker = broker_factory()
    api.url = broker.url
    client = api.client(operation_timeout_seconds=30)
    topic = "persistent://public/default/restart"
    producer = client.create_producer(topic, send_timeout_millis=60_000, block_if_queue_full=True,
                                      batching_enabled=True, batching_max_publish_delay_ms=5)
    consumer = client.subscribe(topic, "sub", initial_position=_earliest(api))
    results = []
    for i in range(300):
        producer.send_async(f"{i}".encode(), lambda res, mid: results.append(res))
        if i == 150:
            broker.restart()
    producer.flush()
    assert len(results) == 300 and all(res == api.module.Result.Ok for res in results)
    # Until every message came, not until a quiet spell: the consumer reconnects on its own
    # backoff (0.1 s doubling), which under load may leave it seconds behind the producer.
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while len(seen) < 300 and time.monotonic() < deadline:
        try:
            msg = consumer.receive(1000)
        except api.module.Timeout:
            continue
        consumer.acknowledge(msg)
        seen.add(int(msg.data()))
    assert sorted(seen) == list(range(300))  # no loss
    # No duplicates in what the producer stored (a consumer may see redeliveries of unacked ones).
    reader = client.create_reader(topic, api.module.MessageId.earliest)
    stored = []
    while reader.has_message_available():
        stored.append(int(reader.read_next(EARLY).data()))
    assert sorted(stored) == list(range(300))
