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
from conftest import official_client
from polling import wait_for

import magnetar.client as mc
from magnetar.admin_client import AdminClient

EARLIEST = pulsar.InitialPosition.Earliest
SOURCE_POSITION = "__MSG_PROP_REPL_SOURCE_POSITION"


def link(brokers: dict, namespace: str = "public/default", *, clusters: list[str] | None = None) -> None:
    """Every broker knows the others as clusters, the tenant allows them all, the namespace
    deduplicates (how a replicator's resends are stored once) and replicates to `clusters`."""
    for name, broker in brokers.items():
        admin = AdminClient(broker.admin_url)
        for other, remote in brokers.items():
            if other != name:
                admin.create_cluster(other, {"serviceUrl": remote.admin_url, "brokerServiceUrl": remote.url})
        admin.update_tenant(namespace.split("/")[0], [], list(brokers))
        admin.set_namespace_policy(namespace, "deduplication", True)
        admin.set_replication_clusters(namespace, clusters or list(brokers))


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


def test_both_ways_at_once_with_many_keys_and_no_loops(two, client_factory):
    """The official client, batching as it does by default, produces on both clusters at once;
    each side receives its own and the other's messages once, keys, properties and event
    times as they were sent."""
    topic = f"persistent://public/default/both-{random.randrange(1 << 30)}"
    count = 400
    consumers = {name: client_factory(b.url).subscribe(topic, "sub", initial_position=EARLIEST)
                 for name, b in two.items()}

    def produce(name: str) -> None:
        producer = client_factory(two[name].url).create_producer(topic)
        for i in range(count):
            producer.send_async(f"{name}-{i}".encode(), None, partition_key=f"k{i % 37}",
                                properties={"from": name, "i": str(i)}, event_timestamp=1000 + i)
        producer.flush()

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
