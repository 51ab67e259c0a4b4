"""Admin message endpoints answer only for the topic named in the path."""

from __future__ import annotations

import json

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
