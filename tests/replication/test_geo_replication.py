"""Geo-replication between real magnetar brokers, each its own cluster, on loopback ports:
the official client and magnetar.client producing on one and consuming on another."""

from __future__ import annotations

import collections
import random
import signal
import threading
import time

import pulsar
import pytest
from admin_http import http
from polling import wait_for

import magnetar.client as mc
from magnetar.admin_client import AdminClient

EARLIEST = pulsar.InitialPosition.Earliest
SOURCE_POSITION = "__MSG_PROP_REPL_SOURCE_POSITION"


def link(brokers: dict, namespace: str = "public/default", *, dedup: bool = True) -> None:
    """Every broker knows the others as clusters, the tenant allows them all, the namespace
    deduplicates (how a replicator's resends are stored once, unless `dedup` is off) and
    replicates to all of them."""
    for name, broker in brokers.items():
        admin = AdminClient(broker.admin_url)
        for other, remote in brokers.items():
            if other != name:
                admin.create_cluster(other, {"serviceUrl": remote.admin_url, "brokerServiceUrl": remote.url})
        admin.update_tenant(namespace.partition("/")[0], [], list(brokers))
        admin.set_namespace_policy(namespace, "deduplication", dedup)
        admin.set_replication_clusters(namespace, list(brokers))


class Sent:
    """send_async's callback: every result kept, so a test knows all were stored."""

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, result, _message_id) -> None:
        self.results.append(result)

    def all_ok(self, count: int) -> bool:
        return len(self.results) == count and all(r == pulsar.Result.Ok for r in self.results)


def start_clusters(broker_factory, *names: str) -> dict:
    return {name: broker_factory(f"clusterName={name}") for name in names}


def drain(consumer, expected: int, timeout: float = 30.0) -> list:
    """Receive until `expected` messages came, then make sure no more come (no duplicates, no loops)."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        try:
            message = consumer.receive(timeout_millis=500)
        except Exception:  # the official client's Timeout, magnetar.client's
            continue
        got.append(message)
        consumer.acknowledge(message)
    try:
        extra = consumer.receive(timeout_millis=1000)
    except Exception:
        extra = None
    assert extra is None, f"one more than the {expected} expected: {extra.data()!r}"
    return got


@pytest.fixture
def two(broker_factory):
    brokers = start_clusters(broker_factory, "east", "west")
    link(brokers)
    return brokers


def test_both_ways_at_once_with_many_keys_and_no_loops(broker_factory, client_factory):
    """The official client, batching as it does by default, produces on both clusters at once;
    each side receives its own and the other's messages once, keys, properties and event
    times as they were sent. Deduplication is off: nothing but replicated_from stops a loop."""
    two = start_clusters(broker_factory, "east", "west")
    link(two, dedup=False)
    topic = f"persistent://public/default/both-{random.randrange(1 << 30)}"
    count = 400
    consumers = {name: client_factory(b.url).subscribe(topic, "sub", initial_position=EARLIEST)
                 for name, b in two.items()}

    def produce(name: str) -> None:
        producer = client_factory(two[name].url).create_producer(topic, block_if_queue_full=True)
        sent = Sent()
        for i in range(count):
            producer.send_async(f"{name}-{i}".encode(), sent, partition_key=f"k{i % 37}",
                                properties={"from": name, "i": str(i)}, event_timestamp=1000 + i)
        producer.flush()
        assert sent.all_ok(count)

    threads = [threading.Thread(target=produce, args=(name,)) for name in two]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for name, consumer in consumers.items():
        got = drain(consumer, 2 * count)
        values = collections.Counter(m.data().decode() for m in got)
        assert values == collections.Counter(f"{origin}-{i}" for origin in two for i in range(count)), name
        for message in got:
            origin, i = message.data().decode().split("-")
            assert message.partition_key() == f"k{int(i) % 37}"
            properties = dict(message.properties())
            # what the remote deduplicates by, kept on the message as Pulsar keeps it
            source = properties.pop(SOURCE_POSITION, None)
            assert properties == {"from": origin, "i": i}
            assert (source is not None) == (origin != name)
            assert message.event_timestamp() == 1000 + int(i)
        # each origin's messages in the order they were sent
        for origin in two:
            order = [int(m.data().decode().split("-")[1]) for m in got if m.data().decode().startswith(origin)]
            assert order == sorted(order)


def test_magnetar_client_produces_here_the_official_client_reads_there(two, client_factory):
    """And the other way round: magnetar.client on the receiving side, batching on both."""
    topic = f"persistent://public/default/mixed-{random.randrange(1 << 30)}"
    east, west = two["east"], two["west"]
    ours = mc.Client(east.url)
    try:
        official = client_factory(west.url)
        on_west = official.subscribe(topic, "sub", initial_position=EARLIEST)
        on_east = ours.subscribe(topic, "sub", initial_position=EARLIEST)
        producer = ours.create_producer(topic)
        for i in range(300):
            producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i % 11}", ordering_key=b"o%d" % (i % 5))
        producer.flush()
        got = drain(on_west, 300)
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(300)]
        assert [m.ordering_key() for m in got[:5]] == ["o0", "o1", "o2", "o3", "o4"]
        official_producer = official.create_producer(topic, block_if_queue_full=True)
        sent = Sent()
        for i in range(200):
            official_producer.send_async(f"w{i}".encode(), sent)
        official_producer.flush()
        assert sent.all_ok(200)
        got = drain(on_east, 500)
        assert [m.data() for m in got] == [f"m{i}".encode() for i in range(300)] + [f"w{i}".encode()
                                                                                  for i in range(200)]
    finally:
        ours.close()


def test_a_remote_killed_and_restarted_during_produce_loses_nothing_and_duplicates_nothing(two, client_factory):
    """SIGKILL the remote while two producers (the official client and magnetar.client, both
    batching) publish on the local cluster: the replicator's cursor holds the backlog, it
    reconnects with backoff, and the remote's deduplication by source position stores what it
    had stored before the crash once, though the two producers' sequence ids interleave."""
    topic = f"persistent://public/default/crash-{random.randrange(1 << 30)}"
    east, west = two["east"], two["west"]
    with_west = mc.Client(west.url)
    with_west.subscribe(topic, "sub", initial_position=EARLIEST).close()  # the subscription exists before produce
    with_west.close()
    count = 1500
    halfway = threading.Event()
    ours = mc.Client(east.url)
    try:
        producers = {"official": client_factory(east.url).create_producer(topic, block_if_queue_full=True),
                     "magnetar": ours.create_producer(topic, block_if_queue_full=True)}

        def produce(name: str) -> None:
            sent = Sent()
            for i in range(count):
                producers[name].send_async(f"{name}-{i}".encode(), sent)
                if i == count // 3:
                    halfway.set()
            producers[name].flush()
            assert sent.all_ok(count), name

        threads = [threading.Thread(target=produce, args=(name,)) for name in producers]
        for thread in threads:
            thread.start()
        halfway.wait(30)
        west.stop(signal.SIGKILL)
        for thread in threads:
            thread.join()
    finally:
        ours.close()
    admin = AdminClient(east.admin_url)
    down = admin.stats(topic)["replication"]["west"]
    assert down["connected"] is False and down["replicationBacklog"] > 0
    west.start()  # same data dir, same port
    with_west = mc.Client(west.url)
    try:
        got = drain(with_west.subscribe(topic, "sub"), 2 * count, timeout=60)
    finally:
        with_west.close()
    values = [m.data().decode() for m in got]
    assert collections.Counter(values) == collections.Counter(f"{name}-{i}" for name in producers
                                                              for i in range(count))
    for name in producers:
        assert [v for v in values if v.startswith(name)] == [f"{name}-{i}" for i in range(count)]
    assert wait_for(lambda: admin.stats(topic)["replication"]["west"]["replicationBacklog"] == 0)
    up = admin.stats(topic)["replication"]["west"]
    assert up["connected"] is True and up["replicationDelayInSeconds"] == 0


def test_three_clusters_each_gets_every_message_once(broker_factory):
    brokers = start_clusters(broker_factory, "east", "west", "north")
    link(brokers)
    topic = f"persistent://public/default/three-{random.randrange(1 << 30)}"
    clients = {name: mc.Client(b.url) for name, b in brokers.items()}
    try:
        consumers = {name: c.subscribe(topic, "sub", initial_position=EARLIEST) for name, c in clients.items()}
        for name, c in clients.items():
            producer = c.create_producer(topic)
            for i in range(100):
                producer.send_async(f"{name}-{i}".encode(), None)
            producer.flush()
        expected = collections.Counter(f"{origin}-{i}" for origin in brokers for i in range(100))
        for name, consumer in consumers.items():
            assert collections.Counter(m.data().decode() for m in drain(consumer, 300)) == expected, name
    finally:
        for c in clients.values():
            c.close()


def three_consuming(broker_factory, client_factory, name: str) -> tuple[dict, str, dict]:
    """Three linked clusters, a topic, and a consumer of it on each (brokers, topic, consumers)."""
    brokers = start_clusters(broker_factory, "east", "west", "north")
    link(brokers)
    topic = f"persistent://public/default/{name}-{random.randrange(1 << 30)}"
    consumers = {cluster: client_factory(b.url).subscribe(topic, "sub", initial_position=EARLIEST)
                 for cluster, b in brokers.items()}
    return brokers, topic, consumers


def test_per_message_replication_clusters_and_disable_replication(broker_factory, client_factory):
    brokers, topic, consumers = three_consuming(broker_factory, client_factory, "per-message")
    producer = client_factory(brokers["east"].url).create_producer(topic, batching_enabled=False)
    producer.send(b"to-west", replication_clusters=["west"])
    producer.send(b"here-only", disable_replication=True)
    producer.send(b"everywhere")
    assert [m.data() for m in drain(consumers["east"], 3)] == [b"to-west", b"here-only", b"everywhere"]
    assert [m.data() for m in drain(consumers["west"], 2)] == [b"to-west", b"everywhere"]
    assert [m.data() for m in drain(consumers["north"], 1)] == [b"everywhere"]


def test_replication_carries_on_across_a_restart_of_the_local_broker(two, client_factory):
    """Messages written while the remote is down wait in the ledger behind the replicator's
    cursor, which survives the local broker's restart; taking the remote out of the namespace's
    clusters removes the replicator and its cursor."""
    topic = f"persistent://public/default/restart-{random.randrange(1 << 30)}"
    east, west = two["east"], two["west"]
    client_factory(west.url).subscribe(topic, "sub", initial_position=EARLIEST).close()
    west.stop()
    producer = client_factory(east.url).create_producer(topic, block_if_queue_full=True)
    sent = Sent()
    for i in range(500):
        producer.send_async(f"m{i}".encode(), sent)
    producer.flush()
    assert sent.all_ok(500)
    east.stop()
    west.start()  # the same binary port, a new admin port: the cluster's data says so
    east.start()
    AdminClient(east.admin_url).update_cluster("west", {"serviceUrl": west.admin_url, "brokerServiceUrl": west.url})
    consumer = client_factory(west.url).subscribe(topic, "sub")
    assert [m.data() for m in drain(consumer, 500)] == [f"m{i}".encode() for i in range(500)]
    admin = AdminClient(east.admin_url)
    assert wait_for(lambda: admin.stats(topic)["replication"]["west"]["replicationBacklog"] == 0)
    assert admin.internal_stats(topic)["cursors"]["pulsar.repl.west"]["active"] is True
    labels = f'cluster="east",namespace="public/default",topic="{topic}",remote_cluster="west"'
    metrics = http("GET", f"{east.admin_url}/metrics")[2].decode()
    assert f"pulsar_replication_backlog{{{labels}}} 0\n" in metrics
    assert f"pulsar_replication_connected_count{{{labels}}} 1\n" in metrics
    admin.set_replication_clusters("public/default", ["east"])
    assert admin.stats(topic)["replication"] == {}
    assert "pulsar.repl.west" not in admin.internal_stats(topic)["cursors"]
    client_factory(east.url).create_producer(topic).send(b"stays here")
    assert drain(consumer, 0) == []


def test_a_partitioned_topic_is_created_on_the_remote_and_replicated_partition_by_partition(two, client_factory):
    """Created on east only: each partition's replicator creates the partitioned topic on west
    through west's admin API (createTopicToRemoteClusterForReplication, on by default) and
    produces to the same partition there."""
    topic = f"persistent://public/default/parts-{random.randrange(1 << 30)}"
    AdminClient(two["east"].admin_url).create_partitioned_topic(topic, 3)
    producer = client_factory(two["east"].url).create_producer(topic, block_if_queue_full=True)
    sent = Sent()
    for i in range(300):
        producer.send_async(f"m{i}".encode(), sent, partition_key=f"k{i % 17}")
    producer.flush()
    assert sent.all_ok(300)
    west_admin = AdminClient(two["west"].admin_url)
    assert wait_for(lambda: west_admin.partitions(topic) == 3)
    consumer = client_factory(two["west"].url).subscribe(topic, "sub", initial_position=EARLIEST)
    got = drain(consumer, 300)
    assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(300))
    partitions = {m.partition_key(): m.topic_name() for m in got}
    on_east = client_factory(two["east"].url).subscribe(topic, "check", initial_position=EARLIEST)
    assert {m.partition_key(): m.topic_name() for m in drain(on_east, 300)} == partitions


@pytest.mark.parametrize("start_at", ["latest", "earliest"])
def test_replication_starts_at_replication_start_at(broker_factory, client_factory, start_at):
    """What a topic held before its namespace replicated goes too with
    replicationStartAt=earliest (the move of a topic's history); by default (latest), as in
    Pulsar, only what is written from then on."""
    brokers = {name: broker_factory(f"clusterName={name}", f"replicationStartAt={start_at}")
               for name in ("east", "west")}
    topic = f"persistent://public/default/start-{random.randrange(1 << 30)}"
    consumer = client_factory(brokers["west"].url).subscribe(topic, "sub", initial_position=EARLIEST)
    producer = client_factory(brokers["east"].url).create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(f"before-{i}".encode())
    link(brokers)
    producer.send(b"after")
    expected = [f"before-{i}".encode() for i in range(20)] if start_at == "earliest" else []
    assert [m.data() for m in drain(consumer, len(expected) + 1)] == [*expected, b"after"]


def test_a_topic_replicates_to_its_own_clusters_over_its_namespaces(broker_factory, client_factory):
    brokers, topic, consumers = three_consuming(broker_factory, client_factory, "own")
    east = AdminClient(brokers["east"].admin_url)
    east.set_topic_replication_clusters(topic, ["east", "west"])
    assert east.topic_replication_clusters(topic) == ["east", "west"]
    producer = client_factory(brokers["east"].url).create_producer(topic, batching_enabled=False)
    producer.send(b"east and west")
    assert [m.data() for m in drain(consumers["west"], 1)] == [b"east and west"]
    assert drain(consumers["north"], 0) == []
    assert east.stats(topic)["replication"].keys() == {"west"}
    east.remove_topic_replication_clusters(topic)
    assert east.topic_replication_clusters(topic) is None
    producer.send(b"everywhere")
    assert [m.data() for m in drain(consumers["north"], 1)] == [b"everywhere"]
    assert [m.data() for m in drain(consumers["west"], 1)] == [b"everywhere"]
