"""A persistent subscription's acknowledgement arithmetic, on a real managed ledger: where a
cumulative ack moves the mark-delete position (a batch acked in part stops one entry short),
what an individual ack deletes, and which ids are refused. Three ledgers of four entries,
so ledger boundaries are crossed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from topic_context import load_topic

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription
from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

CUMULATIVE, INDIVIDUAL = pb.CommandAck.Cumulative, pb.CommandAck.Individual
Sub = pb.CommandSubscribe
ALL_BITS = -1  # a 64-bit word with every bit set, as a signed int64 on the wire


@pytest.fixture
def factory(tmp_path):
    config = ManagedLedgerConfig(max_entries_per_ledger=4, retention_time_seconds=-1, retention_size_bytes=-1)
    with ManagedLedgerFactory(tmp_path / "data", config) as factory:
        yield factory


@pytest.fixture
def ledger(factory):
    managed = factory.open("public/default/persistent/acks")
    for i in range(12):
        managed.append_sync(b"%d" % i)
    return managed


@pytest.fixture
def p(ledger) -> list[Position]:
    return [position for position, _ in ledger.read_entries(ledger.first_position, 100)]


def subscription(factory, ledger, sub_type: int = Sub.Exclusive, batch_level: bool = True) -> PersistentSubscription:
    """A durable subscription from the first entry, as a topic loaded with its cursor has it."""
    ledger.open_cursor("sub", "earliest")
    config = ServiceConfiguration(acknowledgmentAtBatchIndexLevelEnabled=batch_level)
    sub = load_topic(factory, ledger, config).subscriptions["sub"]
    sub.sub_type = sub_type
    return sub


def consumer(*pending: Position) -> SimpleNamespace:
    return SimpleNamespace(pending={position: 1 for position in pending})


def mid(position: Position, ack_set: list[int] | None = None, batch_size: int | None = None) -> pb.MessageIdData:
    message_id = pb.MessageIdData(ledgerId=position.ledger_id % 2**64, entryId=position.entry_id % 2**64)
    if ack_set is not None:
        message_id.ack_set.extend(ack_set)
    if batch_size is not None:
        message_id.batch_size = batch_size
    return message_id


def ack(kind: int, *ids: pb.MessageIdData) -> pb.CommandAck:
    return pb.CommandAck(consumer_id=0, ack_type=kind, message_id=list(ids))


def test_cumulative_ack_marks_everything_up_to_the_entry(factory, ledger, p):
    sub = subscription(factory, ledger)
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[5]))) is None
    assert sub.cursor.mark_delete_position == p[5]
    assert sub.first_unacked_position() == p[6]
    assert sub.backlog() == 6


@pytest.mark.parametrize(("entry", "ack_set", "batch_size", "marked", "pending_indexes"), [
    # bits still set: that batch is not done, so the mark stops at the entry before it
    (6, [0b1100], 4, 5, [2, 3]),
    (6, [0b1000], 4, 5, [3]),
    # the first entry of a ledger: the entry before it is the previous ledger's last
    (4, [0b0110], 4, 3, [1, 2]),
    (8, [0b1], 2, 7, [0]),
    # every bit clear, or bits only beyond the batch: the batch is done
    (6, [0], 4, 6, None),
    (6, [0b110000], 4, 6, None),
    # no batch_size: every bit of the words counts
    (6, [0b110000], None, 5, [4, 5]),
    (6, [0, 1], None, 5, [64]),
    (6, [ALL_BITS], 64, 5, list(range(64))),
])
def test_cumulative_ack_of_a_batch_in_part_stops_one_entry_short(factory, ledger, p, entry, ack_set, batch_size, marked,
                                                                pending_indexes):
    sub = subscription(factory, ledger)
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[entry], ack_set, batch_size))) is None
    assert sub.cursor.mark_delete_position == p[marked]
    if pending_indexes is None:
        assert sub.cursor.get_batch_deleted_indexes(p[entry]) is None
        assert sub.first_unacked_position() == p[entry + 1]
    else:
        assert sub.first_unacked_position() == p[entry]
        remembered = sub.cursor.get_batch_deleted_indexes(p[entry])
        assert remembered is not None
        unacked = [i for i in range(64 * len(remembered)) if remembered[i // 64] >> (i % 64) & 1]
        assert unacked[:len(pending_indexes)] == pending_indexes


def test_a_partial_batch_at_the_very_first_entry_marks_nothing(factory, ledger, p):
    sub = subscription(factory, ledger)
    before = sub.cursor.mark_delete_position
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[0], [0b10], 2))) is None
    assert sub.cursor.mark_delete_position == before
    assert sub.first_unacked_position() == p[0]
    assert sub.backlog() == 12


def test_cumulative_ack_of_nothing_of_a_ledger_marks_the_ledger_before(factory, ledger, p):
    sub = subscription(factory, ledger)
    second_ledger = p[4].ledger_id
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(Position(second_ledger, -1)))) is None
    assert sub.cursor.mark_delete_position == p[3]


def test_cumulative_ack_never_moves_back(factory, ledger, p):
    sub = subscription(factory, ledger)
    sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[7])))
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[2]))) is None
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[7]))) is None
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[8], [0b1], 1))) is None  # steps back to p[7]
    assert sub.cursor.mark_delete_position == p[7]


def test_cumulative_ack_forgets_what_the_consumer_held_up_to_the_mark(factory, ledger, p):
    sub = subscription(factory, ledger)
    sub.redelivery_counts = {p[1]: 2, p[3]: 1, p[4]: 5}
    sub.acknowledge(consumer(p[1], p[3], p[4]), ack(CUMULATIVE, mid(p[3])))
    assert sub.redelivery_counts == {p[4]: 5}


@pytest.mark.parametrize("sub_type", [Sub.Shared, Sub.Key_Shared])
def test_cumulative_ack_on_shared_subscriptions_is_ignored(factory, ledger, p, sub_type):
    sub = subscription(factory, ledger, sub_type)
    before = sub.cursor.mark_delete_position
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[5]))) is None
    assert sub.cursor.mark_delete_position == before


def test_cumulative_ack_naming_two_ids_is_ignored(factory, ledger, p):
    sub = subscription(factory, ledger, Sub.Failover)
    before = sub.cursor.mark_delete_position
    assert sub.acknowledge(consumer(), ack(CUMULATIVE, mid(p[2]), mid(p[5]))) is None
    assert sub.cursor.mark_delete_position == before


@pytest.mark.parametrize("kind", [CUMULATIVE, INDIVIDUAL])
def test_an_id_of_no_entry_is_refused_and_changes_nothing(factory, ledger, p, kind):
    sub = subscription(factory, ledger)
    last = p[-1]
    for bogus in (Position(last.ledger_id, last.entry_id + 1), Position(last.ledger_id + 100, 0)):
        reason = sub.acknowledge(consumer(), ack(kind, mid(bogus)))
        assert reason == f"Invalid message id {bogus}: not an entry of persistent://public/default/acks"
        assert sub.backlog() == 12


@pytest.mark.parametrize("kind", [CUMULATIVE, INDIVIDUAL])
@pytest.mark.parametrize("entry_id", [7, 0, -1])
def test_an_id_before_every_entry_is_acknowledged_already(factory, ledger, p, kind, entry_id):
    sub = subscription(factory, ledger)
    sub.acknowledge(consumer(), ack(INDIVIDUAL, mid(p[0])))
    before = sub.cursor.mark_delete_position
    assert sub.acknowledge(consumer(), ack(kind, mid(Position(p[0].ledger_id - 1, entry_id)))) is None
    assert sub.cursor.mark_delete_position == before and sub.backlog() == 11


@pytest.mark.parametrize("kind", [CUMULATIVE, INDIVIDUAL])
def test_an_entry_id_below_minus_one_is_no_position_at_all(factory, ledger, p, kind):
    bogus = Position(p[0].ledger_id - 1, -2)
    assert sub_refusal(subscription(factory, ledger), kind, bogus) == bogus


def sub_refusal(sub: PersistentSubscription, kind: int, position: Position) -> Position | None:
    reason = sub.acknowledge(consumer(), ack(kind, mid(position)))
    return position if reason and str(position) in reason else None


def test_individual_acks_delete_whole_entries_and_refuse_only_the_bogus_ones(factory, ledger, p):
    sub = subscription(factory, ledger)
    sub.redelivery_counts = {p[2]: 1, p[9]: 3}
    bogus = Position(p[-1].ledger_id, 99)
    reason = sub.acknowledge(consumer(), ack(INDIVIDUAL, mid(p[2]), mid(bogus), mid(p[0]), mid(p[1]), mid(p[5])))
    assert reason == f"Invalid message id {bogus}: not an entry of persistent://public/default/acks"
    assert sub.cursor.mark_delete_position == p[2]
    assert sub.cursor.individually_deleted == [(p[5], p[5])]
    assert sub.backlog() == 8
    assert sub.redelivery_counts == {p[9]: 3}


@pytest.mark.parametrize(("acks", "deleted"), [
    # a set bit is an index still unacknowledged; what is acknowledged stays so
    ([([0b0110], 4)], False),  # two of four left
    ([([0b0110], 4), ([0b0100], 4)], False),  # then one: still not done
    ([([0b0110], 4), ([0b1001], 4)], True),  # the second acks the two the first left
    ([([0b0110], 4), ([0b1011], 4)], False),  # index 1 left by both
    ([([0], 4)], True),
    ([([0b10000], 4)], True),  # a bit beyond the batch does not count
    ([([0b10000], None)], False),  # ... unless the batch size is not told
])
def test_individual_batch_index_acks_delete_the_entry_once_every_index_is(factory, ledger, p, acks, deleted):
    sub = subscription(factory, ledger)
    for ack_set, batch_size in acks:
        assert sub.acknowledge(consumer(), ack(INDIVIDUAL, mid(p[3], ack_set, batch_size))) is None
    assert sub.cursor.is_acknowledged(p[3]) is deleted
    assert sub.backlog() == (11 if deleted else 12)


def test_a_batch_acked_in_part_does_not_stop_the_ids_after_it(factory, ledger, p):
    sub = subscription(factory, ledger)
    assert sub.acknowledge(consumer(), ack(INDIVIDUAL, mid(p[3], [0b0110], 4), mid(p[5]), mid(p[6]))) is None
    assert not sub.cursor.is_acknowledged(p[3])
    assert sub.cursor.is_acknowledged(p[5]) and sub.cursor.is_acknowledged(p[6])


def test_without_batch_index_acks_an_individual_ack_deletes_the_whole_entry(factory, ledger, p):
    sub = subscription(factory, ledger, batch_level=False)
    assert sub.acknowledge(consumer(), ack(INDIVIDUAL, mid(p[3], [0b0110], 4))) is None
    assert sub.cursor.is_acknowledged(p[3])
