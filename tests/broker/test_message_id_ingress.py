"""Message ids a client sends back (acks, seeks, start ids) at ledger and batch boundaries.

The official client writes "nothing of ledger L" as (L, -1), which travels as the
unsigned 2^64-1; ids it names may also lie outside the topic altogether. Either kind
must never move a cursor past messages nobody acknowledged.
"""

from __future__ import annotations

import itertools
import random

import pulsar
import pytest
from rawclient import RawClient

from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
EARLIEST = pulsar.InitialPosition.Earliest


def produce_batches(client, topic: str, count: int, batch: int) -> list[bytes]:
    producer = client.create_producer(topic, batching_enabled=batch > 1, batching_max_messages=max(batch, 2),
                                      batching_max_publish_delay_ms=10_000)
    payloads = [f"m{i}".encode() for i in range(count)]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    producer.close()
    return payloads


def drain(consumer, timeout_ms: int = 1500) -> list[pulsar.Message]:
    got = []
    while True:
        try:
            got.append(consumer.receive(timeout_millis=timeout_ms))
        except pulsar.Timeout:
            return got


def entry_of(msg: pulsar.Message) -> tuple[int, int]:
    mid = msg.message_id()
    return mid.ledger_id(), mid.entry_id()


def test_cumulative_ack_of_first_message_of_first_entry_keeps_the_rest(broker_factory, client_factory, tmp_path):
    broker = broker_factory(data_dir=tmp_path / "data")
    client = client_factory(broker.url)
    topic = "cumulative-first-of-batch"
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
    payloads = produce_batches(client, topic, 1000, 100)
    first = consumer.receive(timeout_millis=10_000)
    assert first.message_id().entry_id() == 0 and first.message_id().batch_index() == 0
    consumer.acknowledge_cumulative(first)
    consumer.close()

    # The whole first entry comes back: the client acked the entry before it, (L, -1).
    consumer = client.subscribe(topic, "sub")
    assert [m.data() for m in drain(consumer)] == payloads
    # Later messages are delivered too, and all of it survives a restart.
    producer = client.create_producer(topic)
    producer.send(b"after")
    assert consumer.receive(timeout_millis=10_000).data() == b"after"
    consumer.close()
    client.close()

    broker.restart()
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub")
    assert [m.data() for m in drain(consumer)] == [*payloads, b"after"]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.has_message_available()


BOUNDARIES = {
    "first message of the topic": lambda bi, e, batch: e.first_of_topic and bi <= 0,
    "first message of a later ledger": lambda bi, e, batch: e.first_of_ledger and not e.first_of_topic
    and bi <= 0,
    "last message of a ledger": lambda bi, e, batch: e.last_of_ledger and bi in (-1, batch - 1),
    "first message of a batch": lambda bi, e, batch: bi <= 0,
    "last message of a batch": lambda bi, e, batch: bi in (-1, batch - 1),
    "any message": lambda bi, e, batch: True,
}


class _EntryPlace:
    """Where an entry sits among the topic's ledgers."""

    def __init__(self, entry: tuple[int, int], entries: list[tuple[int, int]]) -> None:
        index = entries.index(entry)
        self.first_of_topic = index == 0
        self.first_of_ledger = entry[1] == 0
        self.last_of_ledger = index + 1 == len(entries) or entries[index + 1][0] != entry[0]


def test_cumulative_ack_at_ledger_and_batch_boundaries(broker_factory, client_factory):
    """Every boundary, with and without batch-index acks, ledgers rolling over every 3
    entries; batch sizes and the message within each boundary class are drawn at random."""
    broker = broker_factory("managedLedgerMaxEntriesPerLedger=3", "managedLedgerMinLedgerRolloverTimeMinutes=0")
    client = client_factory(broker.url)
    seed = random.randrange(1 << 32)
    rng = random.Random(seed)
    failures = []
    for case, (boundary, batch_index_acks) in enumerate(itertools.product(BOUNDARIES, (False, True))):
        batch = 1 if boundary == "any message" and not batch_index_acks else rng.choice([2, 3, 5])
        failure = _ack_at_boundary(client, f"boundaries-{case}", rng, boundary, batch, batch_index_acks)
        if failure:
            failures.append(f"{boundary}, batch {batch}, batch-index acks {batch_index_acks}: {failure}")
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)


def _ack_at_boundary(client, topic: str, rng: random.Random, boundary: str, batch: int,
                     batch_index_acks: bool) -> str | None:
    payloads = produce_batches(client, topic, batch * rng.randrange(7, 12), batch)
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST, batch_index_ack_enabled=batch_index_acks)
    msgs = [consumer.receive(timeout_millis=10_000) for _ in payloads]
    entries = sorted({entry_of(m) for m in msgs})
    assert len({ledger for ledger, _ in entries}) > 2, "the topic should span several ledgers"
    matches = BOUNDARIES[boundary]
    chosen = rng.choice([i for i, m in enumerate(msgs)
                         if matches(m.message_id().batch_index(), _EntryPlace(entry_of(m), entries), batch)])
    consumer.acknowledge_cumulative(msgs[chosen])
    consumer.close()
    # Nothing lost: everything after the acked message comes back, in order. Without
    # batch-index acks the rest of its batch comes back too.
    index_in_batch = max(msgs[chosen].message_id().batch_index(), 0)
    last_of_batch = msgs[chosen].message_id().batch_index() in (-1, batch - 1)
    expected = payloads[chosen + 1 if (batch_index_acks or last_of_batch) else chosen - index_in_batch:]
    consumer = client.subscribe(topic, "sub", batch_index_ack_enabled=batch_index_acks)
    got = [m.data() for m in drain(consumer, 300 if expected else 800)]
    consumer.close()
    if got != expected:
        return f"acked #{chosen} at {msgs[chosen].message_id()}: got {len(got)} of {len(expected)} messages back"
    return None


def _ack(raw: RawClient, consumer_id: int, mid: MessageId, *, cumulative: bool, request_id: int) -> pb.CommandAck:
    ack = pb.CommandAck(consumer_id=consumer_id, request_id=request_id,
                        ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual)
    ack.message_id.append(mid.to_proto())
    raw.command(T(type=T.ACK, ack=ack))
    return raw.expect(T.ACK_RESPONSE).ackResponse


@pytest.mark.parametrize("cumulative", [True, False], ids=["cumulative", "individual"])
def test_acks_naming_positions_outside_the_topic_change_nothing(broker, client_factory, cumulative):
    client = client_factory(broker.url)
    topic = f"persistent://public/default/foreign-acks-{cumulative}"
    other = "persistent://public/default/foreign-acks-other"
    payloads = produce_batches(client, topic, 5, 1)
    produce_batches(client, other, 5, 1)
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
    first = consumer.receive(timeout_millis=10_000)
    consumer.close()
    own_ledger = first.message_id().ledger_id()

    raw = RawClient(broker.url)
    raw.connect()
    raw.command(T(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=topic, subscription="sub", subType=pb.CommandSubscribe.Exclusive, consumer_id=1, request_id=1)))
    raw.expect(T.SUCCESS)
    foreign = [
        MessageId(own_ledger, 5),          # just past the last entry
        MessageId(own_ledger, 1 << 40),    # far past it
        MessageId(own_ledger + 1, 0),      # another topic's ledger
        MessageId(1 << 40, 0),             # no ledger at all
        MessageId(own_ledger, -2),         # negative, not the "nothing of L" marker
    ]
    for request_id, mid in enumerate(foreign, start=2):
        response = _ack(raw, 1, mid, cumulative=cumulative, request_id=request_id)
        assert response.HasField("error"), f"ack of {mid} was accepted"
    raw.close()

    consumer = client.subscribe(topic, "sub")
    assert [m.data() for m in drain(consumer)] == payloads


def test_seek_and_start_ids_in_another_topics_ledger_stay_in_the_topic(broker, client_factory):
    client = client_factory(broker.url)
    topic = "seek-foreign"
    payloads = produce_batches(client, topic, 5, 1)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    first = reader.read_next(timeout_millis=10_000)
    ledger = first.message_id().ledger_id()
    # A reader starting at a ledger id below any of the topic's starts at its first entry.
    low = pulsar.MessageId(-1, max(ledger - 1, 0), 0, -1)
    reader = client.create_reader(topic, low, start_message_id_inclusive=True)
    assert [reader.read_next(timeout_millis=10_000).data() for _ in payloads] == payloads
    # Seeking past the end leaves nothing to read, and GET_LAST_MESSAGE_ID still answers.
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
    consumer.seek(pulsar.MessageId(-1, ledger + 1000, 0, -1))
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=500)
    consumer.seek(pulsar.MessageId.earliest)
    assert consumer.receive(timeout_millis=10_000).data() == payloads[0]
