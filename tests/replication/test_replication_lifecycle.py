"""What happens to replicated topics over their lives: partitions added on one cluster reach
the others; what is not yet replicated outlives every local consumer's acknowledgement and
any trim, until the remote has it; replication one way is set on the sending side."""

from __future__ import annotations

import random

import pulsar
import pytest
from polling import wait_for

from magnetar.admin_client import AdminClient

NAMESPACE = "public/default"


def link(brokers: dict) -> None:
    """Every cluster knows the others and the namespace replicates to all of them, deduplicating."""
    for name, broker in brokers.items():
        admin = AdminClient(broker.admin_url)
        for other, remote in brokers.items():
            if other != name:
                admin.create_cluster(other, {"serviceUrl": remote.admin_url, "brokerServiceUrl": remote.url})
        admin.update_tenant("public", [], list(brokers))
        admin.set_namespace_policy(NAMESPACE, "deduplication", True)
        admin.set_replication_clusters(NAMESPACE, list(brokers))


def receive(consumer, count: int) -> list[bytes]:
    got = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(message)
        got.append(message.data())
    return got


def test_partitions_added_on_one_cluster_reach_the_other(broker_factory, client_factory):
    """East grows its partitioned topic from 2 to 4: the first replicator of a new partition
    grows west's to 4 too (only there: west does not pass it on), and each partition's
    messages land in the same partition on west."""
    brokers = {name: broker_factory(f"clusterName={name}") for name in ("east", "west")}
    link(brokers)
    topic = f"persistent://public/default/grown-{random.randrange(1 << 30)}"
    east, west = AdminClient(brokers["east"].admin_url), AdminClient(brokers["west"].admin_url)
    east.create_partitioned_topic(topic, 2)
    producer = client_factory(brokers["east"].url).create_producer(f"{topic}-partition-1")
    producer.send(b"before")
    assert wait_for(lambda: west.partitions(topic) == 2)
    east.update_partitioned_topic(topic, 4)
    client = client_factory(brokers["west"].url)
    consumers = {}
    for index in (1, 3):
        consumers[index] = client.subscribe(f"{topic}-partition-{index}", "sub",
                                            initial_position=pulsar.InitialPosition.Earliest)
        client_factory(brokers["east"].url).create_producer(f"{topic}-partition-{index}").send(f"p{index}".encode())
    assert wait_for(lambda: west.partitions(topic) == 4)
    assert receive(consumers[3], 1) == [b"p3"]
    assert receive(consumers[1], 2) == [b"before", b"p1"]
    assert east.partitions(topic) == 4


def test_what_is_not_replicated_yet_outlives_local_acknowledgements_and_trims(broker_factory, client_factory):
    """West is down while east takes 100 messages across ten ledgers and a local subscription
    reads and acknowledges them all: a trim deletes nothing the replicator's cursor has not
    passed; once west is back and has them all, the trim gives the ledgers back."""
    brokers = {"east": broker_factory("clusterName=east", "managedLedgerMaxEntriesPerLedger=10",
                                   "managedLedgerMinLedgerRolloverTimeMinutes=0"),
               "west": broker_factory("clusterName=west")}
    link(brokers)
    topic = f"persistent://public/default/kept-{random.randrange(1 << 30)}"
    client_factory(brokers["west"].url).subscribe(topic, "sub").close()
    brokers["west"].stop()
    east = AdminClient(brokers["east"].admin_url)
    local = client_factory(brokers["east"].url).subscribe(topic, "local")
    producer = client_factory(brokers["east"].url).create_producer(topic, batching_enabled=False)
    for i in range(100):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    assert receive(local, 100) == [f"m{i}".encode() for i in range(100)]
    before = [ledger["ledgerId"] for ledger in east.internal_stats(topic)["ledgers"]]
    assert len(before) >= 10
    east.trim_topic(topic)
    assert [ledger["ledgerId"] for ledger in east.internal_stats(topic)["ledgers"]] == before
    assert east.stats(topic)["replication"]["west"]["replicationBacklog"] == 100
    brokers["west"].start()
    east.update_cluster("west", {"serviceUrl": brokers["west"].admin_url, "brokerServiceUrl": brokers["west"].url})
    consumer = client_factory(brokers["west"].url).subscribe(topic, "sub")
    assert receive(consumer, 100) == [f"m{i}".encode() for i in range(100)]
    assert wait_for(lambda: east.stats(topic)["replication"]["west"]["replicationBacklog"] == 0)
    east.trim_topic(topic)
    assert before[0] not in [ledger["ledgerId"] for ledger in east.internal_stats(topic)["ledgers"]]



def test_replication_one_way_is_set_on_the_sending_side(broker_factory, client_factory):
    """West's namespace lists only west, east's lists both: east's messages reach west (as
    Pulsar's replication is set where it is sent from), and west sends nothing back."""
    brokers = {name: broker_factory(f"clusterName={name}") for name in ("east", "west")}
    link(brokers)
    west = AdminClient(brokers["west"].admin_url)
    west.set_replication_clusters(NAMESPACE, ["west"])
    topic = f"persistent://public/default/one-way-{random.randrange(1 << 30)}"
    on_west = client_factory(brokers["west"].url).subscribe(topic, "sub")
    on_east = client_factory(brokers["east"].url).subscribe(topic, "sub")
    from_east = client_factory(brokers["east"].url).create_producer(topic)
    for i in range(20):
        from_east.send_async(f"east-{i}".encode(), None)
    from_east.flush()
    assert receive(on_west, 20) == [f"east-{i}".encode() for i in range(20)]
    client_factory(brokers["west"].url).create_producer(topic).send(b"west-only")
    assert receive(on_west, 1) == [b"west-only"]
    assert receive(on_east, 20) == [f"east-{i}".encode() for i in range(20)]
    with pytest.raises(Exception, match=r"TimeOut|Timeout"):
        on_east.receive(timeout_millis=500)  # west replicates to no one
    assert "east" not in west.stats(topic).get("replication", {})
