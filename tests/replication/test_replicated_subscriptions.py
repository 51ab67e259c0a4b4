"""Replicated subscriptions (PIP-33) between real magnetar brokers, each its own cluster:
a consumer acknowledges on one cluster, fails over to another and resumes near where it
was; markers never reach consumers; a marker forged by an ordinary producer moves nothing."""

from __future__ import annotations

import json
import random
import re
import time

import pulsar
import pytest
from admin_http import http
from polling import wait_for
from rawclient import RawClient
from standalone import Standalone
from test_geo_replication import link, start_clusters

from magnetar.admin_client import AdminClient
from magnetar.wire import markers
from magnetar.wire.entry import build_entry
from magnetar.wire.frames import encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
SUB = "failover"
SYNC_TIMEOUT = 40.0
KAFKA_READY = r"Kafka listener on 127\.0\.0\.1:(\d+)"


def topic_name(kind: str) -> str:
    return f"persistent://public/default/{kind}-{random.randrange(1 << 30)}"


def subscription_stats(broker, topic: str, name: str = SUB) -> dict | None:
    try:
        return AdminClient(broker.admin_url).stats(topic)["subscriptions"].get(name)
    except Exception:  # the topic is not there yet
        return None


def idle(make, brokers, topic: str, mod=pulsar) -> None:
    """A subscription without consumers on each broker: its backlog counts the messages that
    reached that cluster (markers are no backlog)."""
    for broker in brokers:
        make(broker.url).subscribe(topic, "idle", initial_position=mod.InitialPosition.Earliest).close()


def caught_up(broker, topics: str | list[str], expected: int, name: str = SUB) -> bool:
    """All `expected` messages reached that cluster (its idle subscriptions hold them) and the
    subscription has none left to read there: an update moved it past all of them.

    Both subscriptions are read from one stats answer per topic. Read in two answers, the
    subscription's before the idle one's, a burst of replicated messages landing between
    them passed the check with the subscription not moved: a loaded run then failed over
    before the update came, and resumed before the messages acknowledged since the restart."""
    topics = [topics] if isinstance(topics, str) else topics
    subs, idles = [], []
    for topic in topics:
        try:
            subscriptions = AdminClient(broker.admin_url).stats(topic)["subscriptions"]
        except Exception:  # the topic is not there yet
            return False
        subs.append(subscriptions.get(name))
        idles.append(subscriptions.get("idle"))
    if None in subs or None in idles:
        return False
    return sum(i["msgBacklog"] for i in idles) == expected and all(s["msgBacklog"] == 0 for s in subs)


def produce(client, topic: str, start: int, count: int) -> None:
    """Batched, as the clients produce by default."""
    producer = client.create_producer(topic)
    for i in range(start, start + count):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    producer.close()


def receive(consumer, count: int) -> list[int]:
    """Receive and acknowledge `count` messages: their numbers."""
    got = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=20_000)
        got.append(int(message.data().decode().removeprefix("m")))
        consumer.acknowledge(message)
    return got


def drain(consumer, timeout: float = 1.5) -> list[int]:
    """Everything the consumer gets until it gets nothing for `timeout` seconds."""
    got = []
    while True:
        try:
            message = consumer.receive(timeout_millis=int(timeout * 1000))
        except Exception:  # the official client's Timeout, magnetar.client's
            return got
        got.append(int(message.data().decode().removeprefix("m")))
        consumer.acknowledge(message)


def fail_over(mod, make, to, topic: str, first: int, acked: int, end: int) -> list[int]:
    """Subscribe on `to` and read to the end. Messages below `first` were acknowledged
    before a snapshot every cluster knows of: none of them comes again. From `acked` on
    nothing was acknowledged: all of those come, each once, in order. Between the two, PIP-33
    lets a failover redeliver what was acknowledged after the last usable snapshot."""
    consumer = make(to.url).subscribe(topic, SUB, initial_position=mod.InitialPosition.Earliest,
                                      replicate_subscription_state_enabled=True)
    deadline = time.monotonic() + SYNC_TIMEOUT
    got: list[int] = []
    while (not got or got[-1] != end - 1) and time.monotonic() < deadline:
        got += drain(consumer)
    assert got, "nothing delivered after the failover"
    assert got == sorted(set(got)), f"out of order or twice: {got[:20]}"
    assert got[0] >= first, f"resumed at {got[0]}, before the snapshot taken after {first}: {got[:8]}...{got[-3:]}"
    assert set(range(acked, end)) <= set(got), "messages never acknowledged were lost"
    assert got[-1] == end - 1
    return got


def test_a_consumer_fails_over_and_resumes_where_the_last_snapshot_left_it(broker_factory, api):
    """Acknowledged on east: west's same-named subscription follows (made there by the first
    update); after the failover west delivers what east did not acknowledge, and nothing
    acknowledged before the snapshot. A plain subscription on west sees every message and no
    marker, and ends with no backlog; an idle one counts the messages only (no marker is
    backlog); a reader that starts at the earliest once the markers are stored (nobody
    acknowledged them for it) reads the messages only."""
    mod, make = api
    two = start_clusters(broker_factory, "east", "west")
    link(two)
    east, west = two["east"], two["west"]
    topic = topic_name("failover")
    earliest = mod.InitialPosition.Earliest
    on_east = make(east.url).subscribe(topic, SUB, initial_position=earliest,
                                       replicate_subscription_state_enabled=True)
    plain = make(west.url).subscribe(topic, "plain", initial_position=earliest)
    witness = make(east.url).subscribe(topic, "witness", initial_position=earliest,
                                       replicate_subscription_state_enabled=True)
    idle(make, two.values(), topic, mod)
    admin = AdminClient(east.admin_url)
    assert admin.replicated_subscription_status(topic, SUB) == {topic: True}
    assert admin.stats(topic)["subscriptions"][SUB]["isReplicated"] is True

    first = random.randint(50, 150)
    produce(make(east.url), topic, 0, first)
    assert receive(on_east, first) == list(range(first))
    assert wait_for(lambda: caught_up(west, topic, first), SYNC_TIMEOUT), subscription_stats(west, topic)
    assert subscription_stats(west, topic)["isReplicated"] is True

    more = random.randint(50, 150)
    produce(make(east.url), topic, first, more)
    acked = first + random.randint(1, more - 1)
    assert receive(on_east, acked - first) == list(range(first, acked))
    on_east.close()
    # another replicated subscription acknowledges everything: once west's copy of it caught
    # up, a snapshot past all the messages is in both subscriptions' caches (an update of
    # ours from it would move west past what we did not acknowledge); and once one more
    # message reached west, any update sent before it was applied there
    assert receive(witness, first + more) == list(range(first + more))
    assert wait_for(lambda: caught_up(west, topic, first + more, "witness"), SYNC_TIMEOUT)
    end = first + more + 1
    produce(make(east.url), topic, end - 1, 1)
    for broker in two.values():
        assert wait_for(lambda b=broker: subscription_stats(b, topic, "idle")["msgBacklog"] == end), \
            subscription_stats(broker, topic, "idle")["msgBacklog"]
    fail_over(mod, make, west, topic, first, acked, end)

    assert drain(plain) == list(range(end))
    assert wait_for(lambda: subscription_stats(west, topic, "plain")["msgBacklog"] == 0)
    for broker in two.values():
        reader = make(broker.url).create_reader(topic, mod.MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(int(reader.read_next(timeout_millis=10_000).data().decode().removeprefix("m")))
        assert got == list(range(end))


def test_three_clusters_and_a_restart_in_the_middle(broker_factory, client_factory):
    """Three clusters replicating every way: snapshots need the two others' answers (in two
    rounds). The broker the consumer is on restarts between two rounds of acknowledgements:
    the subscription is still replicated afterwards and the mirroring carries on."""
    three = start_clusters(broker_factory, "east", "west", "north")
    link(three)
    east, north = three["east"], three["north"]
    topic = topic_name("three")
    earliest = pulsar.InitialPosition.Earliest

    def consumer():
        return client_factory(east.url).subscribe(topic, SUB, initial_position=earliest,
                                                  replicate_subscription_state_enabled=True)

    on_east = consumer()
    idle(client_factory, three.values(), topic)
    first = random.randint(50, 150)
    produce(client_factory(east.url), topic, 0, first)
    assert receive(on_east, first) == list(range(first))
    for name in ("west", "north"):
        assert wait_for(lambda b=three[name]: caught_up(b, topic, first), SYNC_TIMEOUT), name

    on_east.close()
    east.restart()
    assert AdminClient(east.admin_url).replicated_subscription_status(topic, SUB) == {topic: True}
    on_east = consumer()
    second = first + random.randint(50, 150)
    produce(client_factory(east.url), topic, first, second - first)
    assert receive(on_east, second - first) == list(range(first, second))
    assert wait_for(lambda: caught_up(north, topic, second), SYNC_TIMEOUT), subscription_stats(north, topic)

    more = random.randint(20, 80)
    produce(client_factory(north.url), topic, second, more)  # from another cluster this time
    acked = second + random.randint(1, more - 1)
    assert receive(on_east, acked - second) == list(range(second, acked))
    on_east.close()
    fail_over(pulsar, client_factory, north, topic, second, acked, second + more)


def forged_update(producer_id: int, sequence_id: int, subscription: str, positions: dict, **fields) -> bytes:
    """A SEND of an UPDATE marker as a broker would write it, from an ordinary producer."""
    update = markers.Update(subscription_name=subscription)
    for cluster, (ledger_id, entry_id) in positions.items():
        update.clusters.add(cluster=cluster).message_id.CopyFrom(
            markers.mk.MarkerPosition(ledger_id=ledger_id, entry_id=entry_id))
    metadata = pb.MessageMetadata(producer_name="forger", sequence_id=sequence_id,
                                  publish_time=int(time.time() * 1000), marker_type=markers.UPDATE, **fields)
    send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    return encode_payload_command(T(type=T.SEND, send=send), build_entry(metadata, update.SerializeToString()))


@pytest.mark.parametrize("replicated_from", [None, "west"])
def test_a_marker_from_an_ordinary_producer_is_refused_and_moves_nothing(broker_factory, client_factory,
                                                                         replicated_from):
    """An UPDATE naming the subscription and the last positions of both clusters, sent by a
    producer that is not a replicator (claiming to come from west, or not): refused, stored
    nowhere, and neither cluster's subscription moves."""
    two = start_clusters(broker_factory, "east", "west")
    link(two)
    east, west = two["east"], two["west"]
    topic = topic_name("forged")
    earliest = pulsar.InitialPosition.Earliest
    client_factory(east.url).subscribe(topic, SUB, initial_position=earliest, replicate_subscription_state_enabled=True)
    client_factory(west.url).subscribe(topic, SUB, initial_position=earliest)
    count = random.randint(5, 30)
    produce(client_factory(east.url), topic, 0, count)
    assert wait_for(lambda: subscription_stats(west, topic)["msgBacklog"] == count)
    ends = {name: AdminClient(b.admin_url).internal_stats(topic)["lastConfirmedEntry"] for name, b in two.items()}
    positions = {name: tuple(int(x) for x in end.split(":")) for name, end in ends.items()}

    raw = RawClient(east.url)
    try:
        raw.connect()
        raw.create_producer(topic, producer_id=7)
        fields = {} if replicated_from is None else {"replicated_from": replicated_from}
        raw.write(forged_update(7, 0, SUB, positions, **fields))
        error = raw.expect(T.SEND_ERROR).send_error
        assert error.error == pb.NotAllowedError
        raw.ping()  # the broker serves on
    finally:
        raw.close()

    # one more message behind where the marker would be: once west has it, a marker replicated
    # before it would have been applied
    produce(client_factory(east.url), topic, count, 1)
    assert wait_for(lambda: subscription_stats(west, topic)["msgBacklog"] == count + 1)
    assert subscription_stats(east, topic)["msgBacklog"] == count + 1


def test_a_partitioned_topic_is_mirrored_partition_by_partition(broker_factory, client_factory):
    """Each partition has its own snapshots: after acknowledging everything on east, every
    partition's subscription on west has no backlog, the status names each partition, and
    after the failover west delivers exactly what came after."""
    two = start_clusters(broker_factory, "east", "west")
    link(two)
    east, west = two["east"], two["west"]
    topic = topic_name("parts")
    partitions = random.randint(2, 4)
    AdminClient(east.admin_url).create_partitioned_topic(topic, partitions)
    on_east = client_factory(east.url).subscribe(topic, SUB, initial_position=pulsar.InitialPosition.Earliest,
                                                 replicate_subscription_state_enabled=True)
    idle(client_factory, two.values(), topic)
    status = AdminClient(east.admin_url).replicated_subscription_status(topic, SUB)
    assert status == {f"{topic}-partition-{i}": True for i in range(partitions)}
    first = random.randint(50, 150)
    producer = client_factory(east.url).create_producer(topic)
    for i in range(first):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i % 13}")
    producer.flush()
    assert sorted(receive(on_east, first)) == list(range(first))
    parts = [f"{topic}-partition-{i}" for i in range(partitions)]
    assert wait_for(lambda: caught_up(west, parts, first), SYNC_TIMEOUT)
    on_east.close()
    more = random.randint(10, 50)
    for i in range(first, first + more):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i % 13}")
    producer.flush()
    on_west = client_factory(west.url).subscribe(topic, SUB, initial_position=pulsar.InitialPosition.Earliest)
    got = []
    deadline = time.monotonic() + SYNC_TIMEOUT
    while len(got) < more and time.monotonic() < deadline:
        got += drain(on_west)
    assert sorted(got) == list(range(first, first + more))


def test_the_status_is_set_and_read_over_the_admin_api_and_kept_across_a_restart(broker_factory, client_factory):
    """Pulsar's replicatedSubscriptionStatus: true or false in the body, anything else 400; a
    subscription that does not exist 404; with enableReplicatedSubscriptions=false, 405 (and a
    SUBSCRIBE asking for it leaves the subscription as it was)."""
    broker = broker_factory()
    topic = topic_name("status")
    client_factory(broker.url).subscribe(topic, SUB).close()
    admin = AdminClient(broker.admin_url)

    def status_url(on, subscription: str = SUB) -> str:
        return (f"{on.admin_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/subscription/"
                f"{subscription}/replicatedSubscriptionStatus")

    assert admin.replicated_subscription_status(topic, SUB) == {topic: False}
    admin.set_replicated_subscription_status(topic, SUB, True)
    assert admin.stats(topic)["subscriptions"][SUB]["isReplicated"] is True
    for body in (b'"yes"', b"1", b"{}", b"not json"):
        status, _, answer = http("POST", status_url(broker), body)
        assert status == 400, (body, answer)
        assert json.loads(answer)["reason"]
    assert http("POST", status_url(broker, "nobody"), b"true")[0] == 404
    broker.restart()
    admin = AdminClient(broker.admin_url)
    assert admin.replicated_subscription_status(topic, SUB) == {topic: True}
    admin.set_replicated_subscription_status(topic, SUB, False)
    assert admin.replicated_subscription_status(topic, SUB) == {topic: False}

    off = broker_factory("enableReplicatedSubscriptions=false")
    client_factory(off.url).subscribe(topic, SUB, replicate_subscription_state_enabled=True).close()
    assert AdminClient(off.admin_url).replicated_subscription_status(topic, SUB) == {topic: False}
    assert http("POST", status_url(off), b"true")[0] == 405


def test_kafka_consumers_step_over_the_markers(broker_factory, client_factory, tmp_path):
    """East also serves Kafka: its topic holds snapshot markers between the messages (the
    subscription caught up on west proves they were written), and a Kafka consumer reading it
    from the start gets the messages only, then the next one past more markers."""
    from kafka import KafkaConsumer  # noqa: PLC0415
    from kafka import TopicPartition as KafkaPartition  # noqa: PLC0415

    east = Standalone(tmp_path / "kafka-east", ["clusterName=east"], args=["--kafka", "0"]).start()
    try:
        west = broker_factory("clusterName=west")
        link({"east": east, "west": west})
        local = f"markers-{random.randrange(1 << 30)}"
        topic = f"persistent://public/default/{local}"
        on_east = client_factory(east.url).subscribe(topic, SUB, initial_position=pulsar.InitialPosition.Earliest,
                                                     replicate_subscription_state_enabled=True)
        idle(client_factory, [west], topic)
        count = random.randint(10, 60)
        produce(client_factory(east.url), topic, 0, count)
        assert receive(on_east, count) == list(range(count))
        assert wait_for(lambda: caught_up(west, topic, count), SYNC_TIMEOUT)
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{re.findall(KAFKA_READY, east.log())[-1]}",
                                 enable_auto_commit=False, consumer_timeout_ms=10_000)
        try:
            consumer.assign([KafkaPartition(local, 0)])
            consumer.seek_to_beginning()
            got = [record.value for _, record in zip(range(count), consumer, strict=False)]
            assert got == [f"m{i}".encode() for i in range(count)]
            assert not consumer.poll(timeout_ms=500)
            produce(client_factory(east.url), topic, count, 1)
            assert next(consumer).value == f"m{count}".encode()
        finally:
            consumer.close()
    finally:
        east.stop()


def test_snapshot_markers_are_not_counted_as_published_messages(broker_factory, api):
    """The snapshot requests a replicated subscription makes its broker store are entries,
    not messages: msgInCounter and /metrics' pulsar_in_messages_total count what producers
    sent. East replicates to west only, so nothing else comes back into east's topic."""
    mod, make = api
    east = broker_factory("clusterName=east", "replicatedSubscriptionsSnapshotFrequencyMillis=100")
    west = broker_factory("clusterName=west")
    admin = AdminClient(east.admin_url)
    admin.create_cluster("west", {"serviceUrl": west.admin_url, "brokerServiceUrl": west.url})
    admin.update_tenant("public", [], ["east", "west"])
    admin.set_replication_clusters("public/default", ["east", "west"])
    topic = topic_name("counted")
    make(east.url).subscribe(topic, SUB, initial_position=mod.InitialPosition.Earliest,
                             replicate_subscription_state_enabled=True)
    count = random.randint(1, 30)
    producer = make(east.url).create_producer(topic, batching_enabled=False)  # an entry a message
    for i in range(count):
        producer.send(f"m{i}".encode())
    assert wait_for(lambda: admin.internal_stats(topic)["numberOfEntries"] > count, SYNC_TIMEOUT), \
        "no snapshot request was stored"
    assert admin.stats(topic)["msgInCounter"] == count
    _, _, page = http("GET", f"{east.admin_url}/metrics")
    assert re.search(rf'^pulsar_in_messages_total{{[^}}]*topic="{re.escape(topic)}"[^}}]*}} {count}(\.0)?$',
                     page.decode(), re.MULTILINE), "pulsar_in_messages_total"
