"""magnetar.admin.AdminClient against a real broker: the operations scripts use."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.admin_client import AdminClient, AdminError


def test_admin_client_round_trip(pulsar_broker_factory, client_factory):
    broker = pulsar_broker_factory()  # a broker of its own, in a thread: tenants and namespaces start empty
    admin = AdminClient(broker.admin_url)
    assert admin.clusters() == ["standalone"]
    admin.create_tenant("acme")
    admin.create_namespace("acme/ns")
    assert admin.namespaces("acme") == ["acme/ns"]
    admin.set_namespace_message_ttl("acme/ns", 60)
    assert admin.get_namespace_message_ttl("acme/ns") == 60
    admin.create_partitioned_topic("persistent://acme/ns/parted", 2)
    assert admin.partitions("persistent://acme/ns/parted") == 2
    admin.update_partitioned_topic("persistent://acme/ns/parted", 3)
    assert len(admin.topics("acme/ns")) == 3

    topic = "persistent://acme/ns/plain"
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(5)]
    admin.create_subscription(topic, "sub", (-1, -1))
    assert admin.subscriptions(topic) == ["sub"]
    peeked = admin.peek_messages(topic, "sub", 2)
    assert [m.data for m in peeked] == [b"m0", b"m1"]
    assert peeked[1].properties == {"i": "1"}
    admin.skip(topic, "sub", 2)
    assert admin.stats(topic)["subscriptions"]["sub"]["msgBacklog"] == 3
    admin.reset_cursor_to_message_id(topic, "sub", ids[1].ledger_id(), ids[1].entry_id())
    assert admin.stats(topic)["subscriptions"]["sub"]["msgBacklog"] == 4
    admin.clear_backlog(topic, "sub")
    assert admin.stats(topic)["subscriptions"]["sub"]["msgBacklog"] == 0
    assert admin.examine_message(topic, "earliest", 1).data == b"m0"
    assert admin.get_message_by_id(topic, ids[4].ledger_id(), ids[4].entry_id()).message_id == (
        f"{ids[4].ledger_id()}:{ids[4].entry_id()}")
    assert admin.internal_stats(topic)["numberOfEntries"] == 5
    assert admin.last_message_id(topic)["entryId"] == ids[4].entry_id()

    with pytest.raises(AdminError) as refused:
        admin.delete_topic(topic)
    assert refused.value.status == 412
    producer.close()
    admin.delete_topic(topic)
    admin.delete_partitioned_topic("persistent://acme/ns/parted")
    admin.delete_namespace("acme/ns")
    admin.delete_tenant("acme")
    assert admin.tenants() == ["public", "pulsar"]
    assert admin.version().startswith("magnetar-")


def test_admin_errors_carry_pulsars_reason(pulsar_broker_factory):
    admin = AdminClient(pulsar_broker_factory().admin_url)
    with pytest.raises(AdminError) as missing:
        admin.stats("persistent://public/default/nope")
    assert missing.value.status == 404
    with pytest.raises(AdminError) as unreachable:
        AdminClient("http://127.0.0.1:1", timeout_seconds=2).tenants()
    assert unreachable.value.status == 0 and "cannot reach" in unreachable.value.reason
    with pytest.raises(AdminError):
        admin.create_namespace("nobody/ns")


def test_topics_of_an_http_service_url_client_and_admin_agree(pulsar_broker_factory, client_factory):
    broker = pulsar_broker_factory()
    client = client_factory(broker.admin_url)
    client.create_producer("agree").send(b"x")
    assert "persistent://public/default/agree" in AdminClient(broker.admin_url).topics("public/default")
    reader = client.create_reader("agree", pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"x"
