"""Topic and subscription operations over Pulsar's REST paths, checked with the official client."""

from __future__ import annotations

import json
import time

import pulsar
import pytest
from admin_http import get_json, http

EARLIEST = pulsar.InitialPosition.Earliest
BASE = "/admin/v2/persistent/public/default"


def call(broker, method: str, path: str, body: object = None) -> tuple[int, object]:
    raw = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    status, _, answer = http(method, f"{broker.admin_url}{BASE}/{path}", raw)
    try:
        return status, json.loads(answer) if answer else None
    except ValueError:
        return status, answer


def backlog(broker, topic: str, sub: str) -> int:
    return get_json(f"{broker.admin_url}{BASE}/{topic}/stats")["subscriptions"][sub]["msgBacklog"]


def fill(client, topic: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def test_subscription_operations(broker, client_factory):
    client = client_factory(broker.url)
    ids = fill(client, "ops", 10)
    assert call(broker, "PUT", "ops/subscription/admin-made", {"ledgerId": -1, "entryId": -1})[0] == 204
    assert call(broker, "PUT", "ops/subscription/admin-made")[0] == 409
    assert call(broker, "GET", "ops/subscriptions") == (200, ["admin-made"])
    assert backlog(broker, "ops", "admin-made") == 10
    assert call(broker, "POST", "ops/subscription/admin-made/skip/3")[0] == 204
    assert backlog(broker, "ops", "admin-made") == 7
    status, _, body = http("GET", f"{broker.admin_url}{BASE}/ops/subscription/admin-made/position/1")
    assert (status, body) == (200, b"m3")
    assert call(broker, "POST", "ops/subscription/admin-made/skip_all")[0] == 204
    assert backlog(broker, "ops", "admin-made") == 0
    assert call(broker, "POST", "ops/subscription/admin-made/resetcursor/0")[0] == 204
    assert backlog(broker, "ops", "admin-made") == 10
    target = {"ledgerId": ids[6].ledger_id(), "entryId": ids[6].entry_id()}
    assert call(broker, "POST", "ops/subscription/admin-made/resetcursor", target)[0] == 204
    consumer = client.subscribe("ops", "admin-made")
    assert [consumer.receive(timeout_millis=10_000).data() for _ in range(4)] == [b"m6", b"m7", b"m8", b"m9"]
    assert call(broker, "DELETE", "ops/subscription/admin-made") == (
        412, {"reason": "Subscription has active connected consumers"})
    consumer.close()
    assert call(broker, "POST", "ops/subscription/admin-made/expireMessages/0")[0] == 204
    assert backlog(broker, "ops", "admin-made") == 0
    assert call(broker, "DELETE", "ops/subscription/admin-made")[0] == 204
    assert call(broker, "GET", "ops/subscriptions") == (200, [])
    assert call(broker, "POST", "ops/subscription/gone/skip_all")[0] == 404


def test_internal_stats_and_last_message_id(broker_factory, client_factory):
    broker = broker_factory("managedLedgerMaxEntriesPerLedger=4", "managedLedgerMinLedgerRolloverTimeMinutes=0")
    client = client_factory(broker.url)
    consumer = client.subscribe("internals", "sub", initial_position=EARLIEST)
    ids = fill(client, "internals", 10)
    msgs = [consumer.receive(timeout_millis=10_000) for _ in range(10)]
    for i in (0, 1, 4, 5, 8):
        consumer.acknowledge(msgs[i])
    deadline = time.monotonic() + 10
    while True:
        stats = get_json(f"{broker.admin_url}{BASE}/internals/internalStats")
        cursor = stats["cursors"]["sub"]
        if cursor["totalNonContiguousDeletedMessagesRange"] == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # acks travel in the client's ack groups
    assert stats["numberOfEntries"] == 10
    assert sum(ledger["entries"] for ledger in stats["ledgers"]) == 10
    assert sum(ledger["size"] for ledger in stats["ledgers"]) == stats["totalSize"]
    assert len(stats["ledgers"]) >= 3
    assert cursor["markDeletePosition"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert cursor["individuallyDeletedMessages"].count("..") == 2
    assert stats["lastConfirmedEntry"] == f"{ids[9].ledger_id()}:{ids[9].entry_id()}"
    assert call(broker, "GET", "internals/lastMessageId")[1] == {
        "ledgerId": ids[9].ledger_id(), "entryId": ids[9].entry_id(), "partitionIndex": -1, "batchIndex": -1}


def test_delete_topic(broker, client_factory):
    client = client_factory(broker.url)
    producer = client.create_producer("doomed", batching_enabled=False)
    producer.send(b"x")
    client.subscribe("doomed", "sub").close()
    assert call(broker, "DELETE", "doomed") == (412, {"reason": "Topic has active producers/subscriptions"})
    stored = list((broker.data_dir / "managed-ledgers").iterdir())
    assert len(stored) == 1
    assert call(broker, "DELETE", "doomed?force=true")[0] == 204
    assert not stored[0].exists()
    assert call(broker, "GET", "doomed/stats")[0] == 404
    assert get_json(f"{broker.admin_url}{BASE}") == []
    assert call(broker, "DELETE", "doomed")[0] == 404
    reader = client.create_reader("doomed", pulsar.MessageId.earliest)
    assert not reader.has_message_available()


def test_partitioned_topic_operations(broker, client_factory):
    assert call(broker, "PUT", "parted/partitions", b"3")[0] == 204
    client = client_factory(broker.url)
    producer = client.create_producer("parted", batching_enabled=False)
    for i in range(9):
        producer.send(f"{i}".encode(), partition_key=str(i))
    stats = call(broker, "GET", "parted/partitioned-stats?perPartition=true")[1]
    assert stats["msgInCounter"] == 9 and stats["metadata"] == {"partitions": 3}
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 9
    assert call(broker, "POST", "parted/partitions", b"5")[0] == 204
    assert call(broker, "GET", "parted/partitions")[1] == {"partitions": 5}
    assert call(broker, "POST", "parted/partitions", b"2")[0] == 412
    producer.close()
    assert call(broker, "DELETE", "parted/partitions")[0] == 204
    assert get_json(f"{broker.admin_url}{BASE}") == []
    assert call(broker, "GET", "parted/partitions")[1] == {"partitions": 0}


def test_unload_keeps_clients_working(broker, client_factory):
    client = client_factory(broker.url)
    consumer = client.subscribe("unloaded", "sub")
    producer = client.create_producer("unloaded", batching_enabled=False)
    producer.send(b"before")
    before = consumer.receive(timeout_millis=10_000)
    assert before.data() == b"before"
    consumer.acknowledge(before)
    deadline = time.monotonic() + 10
    while backlog(broker, "unloaded", "sub") and time.monotonic() < deadline:  # acks leave in groups
        time.sleep(0.05)
    assert call(broker, "PUT", "unloaded/unload")[0] == 204
    producer.send(b"after")
    assert consumer.receive(timeout_millis=10_000).data() == b"after"
    assert call(broker, "PUT", "never-was/unload")[0] == 404


def test_terminate_refuses_new_messages_and_keeps_old_ones(broker, client_factory):
    client = client_factory(broker.url, operation_timeout_seconds=5)
    consumer = client.subscribe("terminated", "sub")
    producer = client.create_producer("terminated", batching_enabled=False, send_timeout_millis=5000)
    ids = [producer.send(f"m{i}".encode()) for i in range(3)]
    status, last = call(broker, "POST", "terminated/terminate")
    assert status == 200 and (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    with pytest.raises(pulsar.PulsarException):
        producer.send(b"too late")
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer("terminated")
    assert [consumer.receive(timeout_millis=10_000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    broker.restart()  # still terminated after a restart
    with pytest.raises(pulsar.TopicTerminated):
        client_factory(broker.url, operation_timeout_seconds=5).create_producer("terminated")
    reader = client_factory(broker.url).create_reader("terminated", pulsar.MessageId.earliest)
    assert [reader.read_next(10_000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]


def test_terminate_every_partition(broker, client_factory):
    assert call(broker, "PUT", "parts/partitions", 3)[0] == 204
    producer = client_factory(broker.url).create_producer("parts", batching_enabled=False,
                                                          message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    sent = [producer.send(f"m{i}".encode()) for i in range(6)]
    status, last_ids = call(broker, "POST", "parts/terminate/partitions")
    assert status == 200 and sorted(last_ids) == ["0", "1", "2"]
    last_by_partition = {}
    for message_id in sent:
        last_by_partition[message_id.partition()] = (message_id.ledger_id(), message_id.entry_id())
    assert {int(k): (v["ledgerId"], v["entryId"]) for k, v in last_ids.items()} == last_by_partition
    with pytest.raises(pulsar.PulsarException):
        producer.send(b"too late")
    assert call(broker, "POST", "nothing-here/terminate/partitions")[0] == 404


def test_reached_end_of_topic_is_sent_to_clients_that_understand_it(broker, client_factory):
    from rawclient import RawClient  # noqa: PLC0415

    from magnetar.wire.proto import pulsar_api_pb2 as pb  # noqa: PLC0415

    t = pb.BaseCommand
    fill(client_factory(broker.url), "ending", 2)
    assert call(broker, "POST", "ending/terminate")[0] == 200
    raw = RawClient(broker.url)
    raw.connect()  # client_version "raw": not the C++ client, which would drop the connection
    raw.command(t(type=t.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic="persistent://public/default/ending", subscription="s", subType=pb.CommandSubscribe.Exclusive,
        consumer_id=1, request_id=1, initialPosition=pb.CommandSubscribe.Earliest)))
    raw.expect(t.SUCCESS)
    raw.command(t(type=t.FLOW, flow=pb.CommandFlow(consumer_id=1, messagePermits=100)))
    kinds = [raw.next_frame().command.type for _ in range(3)]
    assert kinds == [t.MESSAGE, t.MESSAGE, t.REACHED_END_OF_TOPIC]
    raw.close()
