import itertools
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from write_holder import write_held_open

from magnetar.storage import ManagedLedgerConfig, Position, SqliteMetadataStore

TOPIC = "persistent/t"


@pytest.fixture
def ml(open_factory):
    """Three ledgers of 4 entries: acks have ledger boundaries to cross. Retention keeps them
    all (the model test shares this ledger between examples, and consumed ledgers would go)."""
    config = ManagedLedgerConfig(max_entries_per_ledger=4, retention_time_seconds=-1, retention_size_bytes=-1)
    managed = open_factory(config).open(TOPIC)
    for i in range(12):
        managed.append_sync(b"%d" % i)
    return managed


def all_positions(ml):
    return [p for p, _ in ml.read_entries(ml.first_position, 1000)]


def test_new_cursor_at_earliest_and_latest(ml):
    positions = all_positions(ml)
    earliest = ml.open_cursor("e", "earliest")
    assert earliest.mark_delete_position == Position(positions[0].ledger_id, -1)
    assert earliest.first_unacked_position() == positions[0]
    assert earliest.num_unacked_entries() == 12
    latest = ml.open_cursor("l")
    assert latest.mark_delete_position == positions[-1]
    assert latest.first_unacked_position() is None
    assert latest.num_unacked_entries() == 0
    new = ml.append_sync(b"new")
    assert latest.first_unacked_position() == new
    assert ml.open_cursor("e") is earliest


def test_individual_acks_keep_ranges_and_advance_mark_delete_across_ledgers(ml):
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    cursor.delete([p[1], p[2], p[3], p[4], p[5], p[7]])
    # p[3] ends ledger 1 and p[4] starts ledger 2: one range, not two.
    assert cursor.individually_deleted == [(p[1], p[5]), (p[7], p[7])]
    assert cursor.num_unacked_entries() == 6
    assert list(cursor.iter_unacked()) == [p[0], p[6], *p[8:]]
    assert list(cursor.iter_unacked(start=p[2])) == [p[6], *p[8:]]
    cursor.delete([p[0]])
    assert cursor.mark_delete_position == p[5]
    assert cursor.individually_deleted == [(p[7], p[7])]
    cursor.delete([p[6]])
    assert cursor.mark_delete_position == p[7]
    assert cursor.individually_deleted == []
    assert cursor.is_acknowledged(p[7]) and not cursor.is_acknowledged(p[8])
    assert cursor.first_unacked_position() == p[8]


def test_cumulative_ack_clears_ranges_below(ml):
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    cursor.delete([p[2], p[3], p[6], p[9]])
    cursor.mark_delete(p[4])
    assert cursor.mark_delete_position == p[4]
    assert cursor.individually_deleted == [(p[6], p[6]), (p[9], p[9])]
    cursor.mark_delete(p[5])  # now contiguous with the range at p[6]
    assert cursor.mark_delete_position == p[6]
    cursor.mark_delete(p[1])  # backwards: ignored
    assert cursor.mark_delete_position == p[6]
    assert cursor.num_unacked_entries() == 4


def test_reset_makes_position_the_first_unacked(ml):
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    cursor.delete([*p[:6], p[8]])
    cursor.set_batch_deleted_indexes(p[9], [0b1010])
    cursor.reset(p[4])  # first entry of the second ledger
    assert cursor.mark_delete_position == p[3]
    assert cursor.individually_deleted == []
    assert cursor.get_batch_deleted_indexes(p[9]) is None
    assert cursor.first_unacked_position() == p[4]
    cursor.reset(p[0])
    assert cursor.mark_delete_position == Position(p[0].ledger_id, -1)
    assert cursor.num_unacked_entries() == 12


def test_batch_index_acks_cleared_when_entry_acked_whole(ml):
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    cursor.set_batch_deleted_indexes(p[2], [0b0110, 7])
    cursor.set_batch_deleted_indexes(p[5], [1])
    assert cursor.get_batch_deleted_indexes(p[2]) == [0b0110, 7]
    cursor.delete([p[2]])
    assert cursor.get_batch_deleted_indexes(p[2]) is None
    cursor.mark_delete(p[5])
    assert cursor.get_batch_deleted_indexes(p[5]) is None
    cursor.set_batch_deleted_indexes(p[1], [3])  # already acknowledged: nothing to remember
    assert cursor.get_batch_deleted_indexes(p[1]) is None


def test_individual_batch_index_acks_narrow_what_is_left(ml):
    """Each set bit is an index still unacked: sets are ANDed (Pulsar's asyncDelete), so a
    later set that still has an earlier-acked bit (a client's fresh acker after a
    redelivery) does not bring that index back."""
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    assert cursor.intersect_batch_deleted_indexes(p[3], [0b11_1100, -1]) == [0b11_1100, -1]
    assert cursor.intersect_batch_deleted_indexes(p[3], [0b00_1111, 5]) == [0b00_1100, 5]
    assert cursor.get_batch_deleted_indexes(p[3]) == [0b00_1100, 5]
    assert cursor.intersect_batch_deleted_indexes(p[3], [0b11_0011]) == [0]  # a missing word is 0
    cursor.delete([p[3]])
    assert cursor.intersect_batch_deleted_indexes(p[3], [1]) == []  # acknowledged whole already
    assert cursor.get_batch_deleted_indexes(p[3]) is None


def test_cursor_state_persists_across_reopen(open_factory):
    factory = open_factory(ManagedLedgerConfig(max_entries_per_ledger=4))
    ml = factory.open(TOPIC)
    p = [ml.append_sync(b"x") for _ in range(12)]
    cursor = ml.open_cursor("sub", "earliest")
    cursor.delete([p[0], p[1], p[3], p[4], p[5], p[10]])
    cursor.set_batch_deleted_indexes(p[7], [0b101, 2**63])
    cursor.set_property("delayed-index", "snapshot-1")
    ml.open_cursor("untouched", "earliest")
    gone = ml.open_cursor("gone")
    ml.delete_cursor("gone")
    gone.delete([p[11]])  # a deleted cursor must not come back by being written again
    factory.close()

    reopened = open_factory().open(TOPIC)
    assert set(reopened.cursors) == {"sub", "untouched"}
    restored = reopened.cursors["sub"]
    assert restored.mark_delete_position == p[1]
    assert restored.individually_deleted == [(p[3], p[5]), (p[10], p[10])]
    assert restored.get_batch_deleted_indexes(p[7]) == [0b101, 2**63]
    assert restored.properties == {"delayed-index": "snapshot-1"}
    assert restored.num_unacked_entries() == 12 - 2 - 4
    restored.delete([p[2]])
    assert restored.mark_delete_position == p[5]


def test_restore_repairs_an_unsigned_before_first_mark_delete(ml):
    """Brokers before the fix stored a cumulative ack of (L, -1) as (L, 2^64-1); read
    signed it means 'nothing of L', and the hidden messages become deliverable again."""
    p = all_positions(ml)
    second_ledger = p[4].ledger_id
    broken = f'{{"mark_delete":[{second_ledger},{2**64 - 1}],"ranges":[],"batch_acks":[],"properties":{{}}}}'
    cursor = ml.open_non_durable_cursor(p[0])
    cursor.restore(broken.encode())
    assert cursor.mark_delete_position == Position(second_ledger, -1)
    assert list(cursor.iter_unacked()) == p[4:]
    assert cursor.num_unacked_entries() == 8


def test_acks_persisted_by_throttled_flush_without_close(open_factory, tmp_path, wait_until):
    ml = open_factory().open(TOPIC)
    p = [ml.append_sync(b"x") for _ in range(3)]
    cursor = ml.open_cursor("sub", "earliest")
    cursor.delete([p[0], p[1]])
    reader = SqliteMetadataStore(tmp_path / "data" / "metadata.db", read_only=True)
    try:
        key = next(k for k in reader.list("storage/") if k.endswith("/cursors/sub"))
        wait_until(lambda: f"{p[1].ledger_id},{p[1].entry_id}".encode() in reader.get(key))
    finally:
        reader.close()


def test_a_slow_cursor_flush_does_not_hold_up_appends(open_factory):
    """A cursor flush is a metadata commit (an fsync) every 100 ms while consumers ack: on
    the sync thread, the appends queued meanwhile waited it out (issue 45)."""
    factory = open_factory()
    ml = factory.open(TOPIC)
    p = [ml.append_sync(b"x") for _ in range(3)]  # the ledger is listed: appends need no metadata now
    cursor = ml.open_cursor("sub", "earliest")
    flushing = threading.Event()
    snapshot = cursor.snapshot

    def spied_snapshot():
        flushing.set()
        return snapshot()

    cursor.snapshot = spied_snapshot
    with write_held_open(factory.metadata_store):  # the cursor's commit cannot finish meanwhile
        cursor.delete([p[0]])
        assert flushing.wait(10)  # the flush has its snapshot and now waits for the store
        durable = threading.Event()
        ml.append(b"y", lambda _position, _error: durable.set())
        assert durable.wait(10), "an append waited for a cursor flush"

def test_non_durable_cursor_is_not_persisted(open_factory):
    factory = open_factory()
    ml = factory.open(TOPIC)
    p = [ml.append_sync(b"x") for _ in range(3)]
    cursor = ml.open_non_durable_cursor(p[1])
    assert cursor.first_unacked_position() == p[1]
    assert not cursor.durable
    cursor.delete([p[1]])
    assert cursor.mark_delete_position == p[1]
    assert ml.cursors == {}
    factory.close()
    assert open_factory().open(TOPIC).cursors == {}


def test_long_contiguous_acks_use_one_range(ml):
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    cursor.delete(p[1:])
    assert cursor.individually_deleted == [(p[1], p[-1])]
    assert len(cursor.snapshot()) < 200


#: Acks in a run of consecutive entries (a consumer acknowledging in order), in any order.
_RUNS = st.integers(0, 11).flatmap(lambda a: st.integers(a, 11).flatmap(
    lambda b: st.permutations(list(range(a, b + 1)))))


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("delete"), st.lists(st.integers(0, 11), max_size=5) | _RUNS),
            st.tuples(st.just("mark_delete"), st.integers(-1, 11)),
            st.tuples(st.just("reset"), st.integers(0, 11)),
        ),
        max_size=25,
    )
)
def test_cursor_matches_a_set_model(ml, ops):
    """Whatever the ack order, the cursor agrees with a plain set of acked indexes.

    The managed ledger is shared by all examples on purpose (it is only read); each example
    starts from a fresh cursor."""
    p = all_positions(ml)
    ml.delete_cursor("model")
    cursor = ml.open_cursor("model", "earliest")
    acked: set[int] = set()
    for op, arg in ops:
        if op == "delete":
            cursor.delete([p[i] for i in arg])
            acked |= set(arg)
        elif op == "mark_delete":
            current = max((i for i in range(12) if set(range(i + 1)) <= acked), default=-1)
            if arg > current:
                acked |= set(range(arg + 1))
            cursor.mark_delete(p[arg] if arg >= 0 else ml.previous_position(p[0]))
        else:
            cursor.reset(p[arg])
            acked = set(range(arg))
        prefix = max((i for i in range(12) if set(range(i + 1)) <= acked), default=-1)
        expected_md = p[prefix] if prefix >= 0 else ml.previous_position(p[0])
        assert cursor.mark_delete_position == expected_md
        assert cursor.num_unacked_entries() == 12 - len(acked)
        assert [cursor.is_acknowledged(x) for x in p] == [i in acked for i in range(12)]
        assert list(cursor.iter_unacked()) == [p[i] for i in range(12) if i not in acked]
        # Ranges are maximal: none touches the mark-delete position or the next range.
        ranges = cursor.individually_deleted
        assert all(ml.next_position(end) != start for (_, end), (start, _) in itertools.pairwise(ranges))
        assert not ranges or ml.next_position(cursor.mark_delete_position) != ranges[0][0]
    restored = ml.open_non_durable_cursor(p[0])
    restored.restore(cursor.snapshot())
    assert restored.individually_deleted == cursor.individually_deleted
    assert restored.num_unacked_entries() == cursor.num_unacked_entries()


def test_mark_delete_inside_an_acked_range_keeps_the_rest_and_the_counts(ml):
    """A mark-delete landing inside a range of individual acks cuts the range there: what is
    left of it joins the mark, and the ranges beyond it stay, counted right."""
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    cursor.delete([*p[2:7], p[9], p[10]])  # ranges p2..p6 (across a ledger) and p9..p10
    assert cursor.num_unacked_entries() == 5
    cursor.mark_delete(p[4])
    assert cursor.mark_delete_position == p[6]
    assert cursor.individually_deleted == [(p[9], p[10])]
    assert cursor.num_unacked_entries() == 3
    assert list(cursor.iter_unacked()) == [p[7], p[8], p[11]]
    cursor.mark_delete(p[9])  # inside the last range, whose rest is p10
    assert cursor.mark_delete_position == p[10]
    assert cursor.individually_deleted == []
    assert cursor.num_unacked_entries() == 1


def test_iter_unacked_from_a_position_includes_it(ml):
    p = all_positions(ml)
    cursor = ml.open_cursor("s", "earliest")
    cursor.delete([p[1], p[5]])
    assert list(cursor.iter_unacked(start=p[4])) == [p[4], *p[6:]]
    assert list(cursor.iter_unacked(start=p[5])) == p[6:]
    cursor.mark_delete(p[7])
    assert list(cursor.iter_unacked(start=p[3])) == p[8:]


def test_a_cursor_on_an_empty_ledger_has_nothing_to_deliver(open_factory):
    empty = open_factory().open("persistent/empty")
    cursor = empty.open_cursor("s", "earliest")
    assert cursor.num_unacked_entries() == 0
    assert list(cursor.iter_unacked()) == []
    assert cursor.first_unacked_position() is None


def test_closing_the_factory_persists_every_cursor_in_one_commit(open_factory):
    """A commit is an fsync: one per cursor made stopping a broker of 10,000 topics take most
    of a minute. Every cursor's acks are still found after the reopen."""
    factory = open_factory()
    positions = {}
    for n in range(40):
        ml = factory.open(f"{TOPIC}-{n}")
        written = [ml.append_sync(b"x") for _ in range(3)]
        ml.open_cursor("sub", "earliest").delete([written[n % 3]])
        positions[n] = written[n % 3]
    statements = []
    factory.metadata_store._conn.set_trace_callback(statements.append)
    factory.close()
    commits = " ".join(statements).split("COMMIT")
    # the cursors in one commit at the end, beside the sync thread's flush of those marked
    # meanwhile (one commit every 100 ms): far fewer commits than cursors
    assert sum("/cursors/" in commit for commit in commits) <= len(positions) // 4
    assert sum(commit.count("/cursors/") for commit in commits) >= len(positions)

    reopened = open_factory()
    for n, acked in positions.items():
        cursor = reopened.open(f"{TOPIC}-{n}").cursors["sub"]
        assert cursor.num_unacked_entries() == 2
        assert acked not in list(cursor.iter_unacked())


def test_an_in_order_run_moves_the_mark_delete_over_the_ranges_and_batch_acks_it_covers(ml):
    """One ACK carrying the ids of entries in order from the mark-delete position (across a
    ledger's end, with a duplicate) moves the cursor in one step: what was acknowledged
    inside the run before (a range, a batch's indexes) must go, what lies beyond stays."""
    p = all_positions(ml)
    cursor = ml.open_cursor("run", "earliest")
    cursor.set_batch_deleted_indexes(p[2], [0b10])
    cursor.set_batch_deleted_indexes(p[10], [0b10])
    cursor.delete([p[5], p[9]])
    cursor.delete([p[3], p[0], p[1], p[2], p[3]])
    assert cursor.mark_delete_position == p[3]
    assert cursor.get_batch_deleted_indexes(p[2]) is None
    cursor.delete([p[6], p[4], p[5], p[7], p[11]])
    assert cursor.mark_delete_position == p[7]
    assert cursor.individually_deleted == [(p[9], p[9]), (p[11], p[11])]
    assert cursor.get_batch_deleted_indexes(p[10]) == [0b10]
    assert list(cursor.iter_unacked()) == [p[8], p[10]]
    assert cursor.num_unacked_entries() == 2
