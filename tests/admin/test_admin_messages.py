"""Admin message endpoints answer only for the topic named in the path."""

from __future__ import annotations

import json
from datetime import datetime

import pulsar
from admin_http import http, http_get

BASE = "/admin/v2/persistent/public/default"


def test_get_message_by_id_refuses_another_topics_ledger(broker, client_factory):
    client = client_factory(broker.url)
    # An empty topic, created before another topic writes its first ledger.
    assert http("PUT", f"{broker.admin_url}{BASE}/empty")[0] == 204
    producer = client.create_producer("writer", batching_enabled=False)
    written = producer.send(b"secret of another topic")
    ledger, entry = written.ledger_id(), written.entry_id()
    assert http_get(f"{broker.admin_url}{BASE}/writer/ledger/{ledger}/entry/{entry}")[2] == b"secret of another topic"

    status, headers, body = http_get(f"{broker.admin_url}{BASE}/empty/ledger/{ledger}/entry/{entry}")
    assert status == 404, body
    assert headers["Content-Type"].startswith("application/json")
    assert json.loads(body)["reason"].startswith("Message not found")
    assert b"secret" not in body

    # A topic with data of its own, asked for the other topic's ledger: also 404.
    own = client.create_producer("reader-topic", batching_enabled=False).send(b"mine")
    assert own.ledger_id() != ledger
    assert http_get(f"{broker.admin_url}{BASE}/reader-topic/ledger/{ledger}/entry/{entry}")[0] == 404
    assert http_get(f"{broker.admin_url}{BASE}/reader-topic/ledger/{own.ledger_id()}/entry/0")[2] == b"mine"


def test_get_message_by_id_bad_ids(broker, client_factory):
    client = client_factory(broker.url)
    client.create_producer("ids", batching_enabled=False).send(b"x")
    topic = f"{broker.admin_url}{BASE}/ids"
    for ledger, entry, status in [("abc", "0", 400), ("1", "-1", 404), ("-1", "0", 404),
                                  ("1", str(1 << 70), 412), (str(1 << 70), "0", 412)]:  # beyond a long: 412
        got, _, body = http_get(f"{topic}/ledger/{ledger}/entry/{entry}")
        assert got == status, (ledger, entry, body)
        assert "reason" in json.loads(body)


def test_seek_to_another_topics_position_reads_only_own_entries(broker, client_factory):
    client = client_factory(broker.url)
    other = client.create_producer("seek-other", batching_enabled=False)
    foreign = [other.send(f"o{i}".encode()) for i in range(3)]
    mine = client.create_producer("seek-mine", batching_enabled=False)
    own = [mine.send(f"m{i}".encode()) for i in range(3)]
    assert foreign[0].ledger_id() < own[0].ledger_id()
    consumer = client.subscribe("seek-mine", "sub", initial_position=pulsar.InitialPosition.Earliest)
    consumer.seek(pulsar.MessageId(-1, foreign[1].ledger_id(), foreign[1].entry_id(), -1))
    assert [consumer.receive(timeout_millis=10_000).data() for _ in own] == [b"m0", b"m1", b"m2"]


def test_message_id_by_index_finds_the_entry_holding_it(broker, client_factory):
    """PIP-415's getMessageIdByIndex: a binary search over the entries' PIP-70 indexes, an
    index inside a batch answered with its batch's entry."""
    client = client_factory(broker.url)
    topic = f"{broker.admin_url}{BASE}/by-index"
    single = client.create_producer("by-index", batching_enabled=False)
    unbatched = [single.send(b"u%d" % n) for n in range(3)]  # indexes 0, 1, 2
    single.close()
    batcher = client.create_producer("by-index", batching_enabled=True, batching_max_messages=4,
                                     batching_max_publish_delay_ms=60_000)
    for n in range(4):  # one entry, indexes 3 to 6
        batcher.send_async(b"b%d" % n, None)
    batcher.flush()
    batch = http_get(f"{topic}/examinemessage?initialPosition=latest&messagePosition=1")[1]["X-Pulsar-Message-ID"]

    def found(index: int) -> tuple[int, int]:
        status, _, body = http_get(f"{topic}/getMessageIdByIndex?index={index}")
        assert status == 200, body
        answer = json.loads(body)
        return answer["ledgerId"], answer["entryId"]

    assert [found(n) for n in range(3)] == [(m.ledger_id(), m.entry_id()) for m in unbatched]
    assert {found(n) for n in range(3, 7)} == {tuple(int(part) for part in batch.split(":"))}
    assert found(-5) == (unbatched[0].ledger_id(), unbatched[0].entry_id())  # before the first: the first
    for query, status in [("index=7", 404), ("index=abc", 400), ("", 400), (f"index={1 << 70}", 412)]:
        got, _, body = http_get(f"{topic}/getMessageIdByIndex?{query}")
        assert got == status and "reason" in json.loads(body), (query, body)
    assert http("PUT", f"{broker.admin_url}{BASE}/by-index-parted/partitions", b"2")[0] == 204
    assert http_get(f"{broker.admin_url}{BASE}/by-index-parted/getMessageIdByIndex?index=0")[0] == 405


def test_message_id_by_timestamp_finds_the_first_entry_at_or_after_it(broker, client_factory):
    client = client_factory(broker.url)
    topic = f"{broker.admin_url}{BASE}/by-time"
    producer = client.create_producer("by-time", batching_enabled=False)
    sent = [producer.send(b"t%d" % n) for n in range(4)]
    times = [http_get(f"{topic}/ledger/{m.ledger_id()}/entry/{m.entry_id()}")[1][
        "X-Pulsar-Broker-Entry-METADATA-timestamp"] for m in sent]
    millis = [int(datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() * 1000) for t in times]

    def found(timestamp: int) -> tuple[int, int]:
        status, _, body = http_get(f"{topic}/messageid/{timestamp}")
        assert status == 200, body
        answer = json.loads(body)
        return answer["ledgerId"], answer["entryId"]

    for n, at in enumerate(millis):
        first = millis.index(at)  # entries stored within the same millisecond: the first of them
        assert found(at) == (sent[first].ledger_id(), sent[first].entry_id()), n
    assert found(0) == (sent[0].ledger_id(), sent[0].entry_id())
    assert http_get(f"{topic}/messageid/{millis[-1] + 1}")[0] == 404
    assert http_get(f"{topic}/messageid/soon")[0] == 400
