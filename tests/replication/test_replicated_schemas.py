"""Schemas replicated as Pulsar's replicator replicates them: registered on the remote before
the first message written with them, each message carrying the remote's version of its
schema; a remote that refuses the schema stops that topic's replicator, losing nothing."""

from __future__ import annotations

import random

import pulsar
from polling import wait_for

from magnetar.admin_client import AdminClient

NAMESPACE = "public/default"


def east_to_west(broker_factory) -> dict:
    """Two clusters whose namespaces replicate to each other."""
    brokers = {name: broker_factory(f"clusterName={name}") for name in ("east", "west")}
    for name, broker in brokers.items():
        admin = AdminClient(broker.admin_url)
        other = "west" if name == "east" else "east"
        admin.create_cluster(other, {"serviceUrl": brokers[other].admin_url, "brokerServiceUrl": brokers[other].url})
        admin.update_tenant("public", [], ["east", "west"])
        admin.set_namespace_policy(NAMESPACE, "deduplication", True)
        admin.set_replication_clusters(NAMESPACE, ["east", "west"])
    return brokers


def version_number(raw: bytes | str) -> int:
    return int.from_bytes(raw if isinstance(raw, bytes) else raw.encode("latin-1"), "big")


def records(module):
    class Old(module.schema.Record):
        a = module.schema.String()

    class Event(module.schema.Record):
        a = module.schema.String()
        n = module.schema.Integer()

    return Old, Event


def test_the_schema_is_registered_on_the_remote_and_messages_carry_its_version_there(broker_factory, api):
    """West already has another schema (version 0) on the topic, so east's schema is version 0
    on east and version 1 on west: the replicated messages must say 1 to be read there."""
    module, make = api
    brokers = east_to_west(broker_factory)
    west_admin = AdminClient(brokers["west"].admin_url)
    west_admin.set_namespace_policy(NAMESPACE, "schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    topic = f"persistent://public/default/schemas-{random.randrange(1 << 30)}"
    old, event = records(module)
    west_producer = make(brokers["west"].url).create_producer(topic, schema=module.schema.JsonSchema(old))
    west_producer.send(old(a="west"), disable_replication=True)  # east must not learn this schema first
    consumer = make(brokers["west"].url).subscribe(topic, "sub", schema=module.schema.JsonSchema(event),
                                                   initial_position=pulsar.InitialPosition.Latest)
    producer = make(brokers["east"].url).create_producer(topic, schema=module.schema.JsonSchema(event))
    for i in range(20):
        producer.send_async(event(a=f"e{i}", n=i), None)
    producer.flush()
    got = []
    for _ in range(20):
        message = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(message)
        got.append(message)
    assert [(m.value().a, m.value().n) for m in got] == [(f"e{i}", i) for i in range(20)]
    assert {version_number(m.schema_version()) for m in got} == {1}
    latest = west_admin.get_schema(topic)
    assert latest["version"] == 1 and '"n"' in latest["data"]
    assert AdminClient(brokers["east"].admin_url).get_schema(topic)["version"] == 0


def test_a_remote_refusing_the_schema_stops_the_replicator_and_loses_nothing(broker_factory, client_factory):
    """West allows no new schema on its namespace: east's replicator stops with the refusal in
    its stats, the backlog stays; once west allows it and east reloads the topic, all of it goes."""
    brokers = east_to_west(broker_factory)
    west_admin = AdminClient(brokers["west"].admin_url)
    west_admin.set_namespace_policy(NAMESPACE, "isAllowAutoUpdateSchema", False)
    topic = f"persistent://public/default/refused-{random.randrange(1 << 30)}"
    _, event = records(pulsar)
    producer = client_factory(brokers["east"].url).create_producer(topic, schema=pulsar.schema.JsonSchema(event))
    for i in range(30):
        producer.send_async(event(a=f"e{i}", n=i), None)
    producer.flush()
    east_admin = AdminClient(brokers["east"].admin_url)

    def replicator() -> dict:
        return east_admin.stats(topic)["replication"]["west"]

    assert wait_for(lambda: "refused schema" in replicator()["lastError"], timeout=30), replicator()
    stats = replicator()
    assert stats["connected"] is False and stats["replicationBacklog"] == 30
    assert stats["lastError"].startswith("stopped")
    west_admin.set_namespace_policy(NAMESPACE, "isAllowAutoUpdateSchema", True)
    consumer = client_factory(brokers["west"].url).subscribe(topic, "sub", schema=pulsar.schema.JsonSchema(event),
                                                             initial_position=pulsar.InitialPosition.Earliest)
    east_admin.unload(topic)
    client_factory(brokers["east"].url).create_producer(topic, schema=pulsar.schema.JsonSchema(event))  # loads it
    got = []
    for _ in range(30):
        message = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(message)
        got.append(message.value().n)
    assert got == list(range(30))
    assert wait_for(lambda: replicator()["replicationBacklog"] == 0)


def test_messages_without_a_schema_replicate_beside_schema_ones(broker_factory, client_factory):
    """A bytes producer (no schema version) and a schema producer, one message each in turn:
    all go once, in order."""
    brokers = east_to_west(broker_factory)
    topic = f"persistent://public/default/mixed-schemas-{random.randrange(1 << 30)}"
    consumer = client_factory(brokers["west"].url).subscribe(topic, "sub")
    east = client_factory(brokers["east"].url)
    plain = east.create_producer(topic, batching_enabled=False)
    typed = east.create_producer(topic, schema=pulsar.schema.StringSchema(), batching_enabled=False)
    for i in range(10):
        plain.send(f"b{i}".encode())
        typed.send(f"s{i}")
    got = []
    for _ in range(20):
        message = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(message)
        got.append(message.data().decode())
    assert got == [f"{kind}{i}" for i in range(10) for kind in "bs"]
