"""A cursor: how far a subscription has acknowledged a managed ledger."""

from __future__ import annotations

import concurrent.futures
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from magnetar.storage.position import Position
from magnetar.storage.range_set import PositionRangeSet
from magnetar.wire.message_id import to_signed64


class PositionSpace(Protocol):
    """What a cursor needs to know about its managed ledger's positions."""

    @property
    def last_confirmed_position(self) -> Position | None: ...

    def next_position(self, position: Position) -> Position: ...

    def previous_position(self, position: Position) -> Position: ...

    def entries_between(self, start_inclusive: Position, end_inclusive: Position) -> int: ...


class ManagedCursor:
    """Mark-delete position, acknowledged ranges beyond it, batch-index acks and properties.

    Mutated by the broker's event-loop thread, snapshotted by the sync thread for throttled
    persistence; a lock keeps the snapshot consistent. `on_change` tells the owner there is
    something to persist; `persist` writes this cursor now (flush()).
    """

    def __init__(
        self,
        name: str,
        space: PositionSpace,
        mark_delete: Position,
        *,
        on_change: Callable[[ManagedCursor], None] | None = None,
        persist: Callable[[ManagedCursor], None] | None = None,
        on_mark_delete: Callable[[Position, Position], None] | None = None,
    ) -> None:
        self.name = name
        self._space = space
        self._mark_delete = mark_delete
        self._acked = PositionRangeSet(space.next_position, space.entries_between)
        self._batch_acks: dict[Position, list[int]] = {}
        self._properties: dict[str, str] = {}
        self._on_change = on_change
        self._persist = persist
        self._on_mark_delete = on_mark_delete
        """Told (before, after) when acks move the mark-delete position: it may free a ledger."""
        self._lock = threading.Lock()
        self._stored: concurrent.futures.Future[None] | None = None
        """Its first record's write off the loop (None: no such write, stored when made)."""

    @property
    def durable(self) -> bool:
        return self._persist is not None

    def detach(self) -> None:
        """Stop persisting: the cursor was deleted, later acks must not resurrect it."""
        self._on_change = self._persist = None
        self._on_mark_delete = None

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self)

    # --- acknowledgement -------------------------------------------------------------------

    @property
    def mark_delete_position(self) -> Position:
        return self._mark_delete

    @property
    def individually_deleted(self) -> list[tuple[Position, Position]]:
        """Acknowledged ranges [start, end] (inclusive) beyond the mark-delete position."""
        with self._lock:
            return list(self._acked)

    def delete(self, positions: Iterable[Position]) -> None:
        """Individual ack; the mark-delete position follows when the acks reach it."""
        with self._lock:
            before = self._mark_delete
            ordered = sorted(positions)
            for position in ordered[self._run_from_mark_delete(ordered):]:
                if position > self._mark_delete:
                    self._acked.add(position)
                    self._batch_acks.pop(position, None)
            self._advance_mark_delete()
        self._changed()
        self._moved(before)

    def _run_from_mark_delete(self, ordered: list[Position]) -> int:
        """Move the mark-delete position over the leading run of `ordered` that follows it
        entry by entry; returns where the rest begins. A consumer acknowledging in order (the
        usual case: one ACK carries many ids) gets the cursor moved once, not each id put in
        the acknowledged ranges and taken out again."""
        next_position, mark, index = self._space.next_position, self._mark_delete, 0
        for position in ordered:
            if position > mark:  # at or below it: acknowledged already
                if position != next_position(mark):
                    break
                mark = position
            index += 1
        if mark != self._mark_delete:
            self._mark_delete = mark
            self._acked.remove_through(mark)
            self._drop_batch_acks_through(mark)
        return index

    def mark_delete(self, position: Position) -> None:
        """Cumulative ack up to `position`; going backwards is ignored (use reset())."""
        with self._lock:
            if position <= self._mark_delete:
                return
            before = self._mark_delete
            self._mark_delete = position
            self._acked.remove_through(position)
            self._drop_batch_acks_through(position)
            self._advance_mark_delete()
        self._changed()
        self._moved(before)

    def _moved(self, before: Position) -> None:
        after = self._mark_delete
        if self._on_mark_delete is not None and after != before:
            self._on_mark_delete(before, after)

    def _advance_mark_delete(self) -> None:
        while (end := self._acked.pop_first_if_starts_at(self._space.next_position(self._mark_delete))) is not None:
            self._mark_delete = end
            self._drop_batch_acks_through(end)

    def _drop_batch_acks_through(self, position: Position) -> None:
        for acked in [p for p in self._batch_acks if p <= position]:
            del self._batch_acks[acked]

    def is_acknowledged(self, position: Position) -> bool:
        return position <= self._mark_delete or position in self._acked

    def reset(self, position: Position) -> None:
        """Seek: `position` becomes the first unacknowledged entry, acks after it are forgotten."""
        with self._lock:
            self._mark_delete = self._space.previous_position(position)
            self._acked.clear()
            self._batch_acks.clear()
        self._changed()

    # --- batch-index acks ------------------------------------------------------------------

    def set_batch_deleted_indexes(self, position: Position, ack_set_words: list[int]) -> None:
        """Remember a partial cumulative ack of a batch entry (stored as given: a cumulative
        ack says where the subscription stands, as Pulsar's asyncMarkDelete puts it)."""
        with self._lock:
            if self.is_acknowledged(position):
                return
            self._batch_acks[position] = list(ack_set_words)
        self._changed()

    def intersect_batch_deleted_indexes(self, position: Position, ack_set_words: list[int]) -> list[int]:
        """Individual ack of some indexes of a batch entry; returns the words left ([] if none).

        A set bit is an index still unacknowledged, so what is left is what every ack so far
        left: the sets are ANDed, as Pulsar's ManagedCursorImpl.asyncDelete does. Storing the
        latest set instead would undo earlier acks whenever a client sends a set that does
        not carry them, which the C++ client does for a redelivered batch (it starts a new
        acker with every bit set); the entry would then never be complete. A word missing
        from the shorter set is 0, as in java.util.BitSet.and. The caller deletes the entry
        once nothing is left.
        """
        with self._lock:
            if self.is_acknowledged(position):
                return []
            stored = self._batch_acks.get(position)
            if stored is None:
                words = list(ack_set_words)
            else:  # not strict: the shorter set's missing words are 0, so the AND stops there
                words = [a & b for a, b in zip(stored, ack_set_words, strict=False)]
            self._batch_acks[position] = words
        self._changed()
        return words

    def get_batch_deleted_indexes(self, position: Position) -> list[int] | None:
        words = self._batch_acks.get(position)
        return None if words is None else list(words)

    # --- backlog and dispatch --------------------------------------------------------------

    def num_unacked_entries(self) -> int:
        last = self._space.last_confirmed_position
        if last is None or last <= self._mark_delete:
            return 0
        with self._lock:
            first = self._space.next_position(self._mark_delete)
            return max(0, self._space.entries_between(first, last) - len(self._acked))

    def first_unacked_position(self) -> Position | None:
        return next(self.iter_unacked(), None)

    def iter_unacked(self, start: Position | None = None) -> Iterator[Position]:
        """Unacknowledged durable positions from `start` (default: the first one), in order.

        Jumps over acknowledged ranges in one step each, so a subscription with long acked
        runs costs per range, not per entry. Reads live state: acks made while iterating
        are seen.
        """
        space = self._space
        position = space.next_position(self._mark_delete)
        if start is not None and start > position:
            position = space.next_position(space.previous_position(start))  # skips non-entries
        while True:
            last = space.last_confirmed_position
            if last is None or position > last:
                return
            if position <= self._mark_delete:
                position = space.next_position(self._mark_delete)
            elif (acked_range := self._acked.range_containing(position)) is not None:
                position = space.next_position(acked_range[1])
            else:
                yield position
                position = space.next_position(position)

    # --- properties ------------------------------------------------------------------------

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def set_property(self, key: str, value: str) -> None:
        with self._lock:
            self._properties[key] = value
        self._changed()

    def remove_property(self, key: str) -> None:
        with self._lock:
            self._properties.pop(key, None)
        self._changed()

    # --- creation --------------------------------------------------------------------------

    def creating(self) -> None:
        """Its first record is queued for writing: `when_created` callers wait for it."""
        self._stored = concurrent.futures.Future()

    def when_created(self, callback: Callable[[BaseException | None], None]) -> None:
        """Call `callback` once the cursor is stored (None) or could not be (the error): at
        once if that is known, else on the thread that wrote it. A subscription is reported
        created only then, so one a client was told of survives a crash."""
        stored = self._stored
        if stored is None:
            callback(None)
        else:
            stored.add_done_callback(lambda done: callback(done.exception()))

    def created(self, error: BaseException | None) -> None:
        """The first record's write ended (`error` if it failed): tell whoever waits."""
        assert self._stored is not None  # creating() came first
        if error is None:
            self._stored.set_result(None)
        else:
            self._stored.set_exception(error)

    # --- persistence -----------------------------------------------------------------------

    def flush(self) -> None:
        """Persist now rather than at the next throttled flush.

        May run on another thread (a transaction's commit stores its acks off the loop) while
        the loop detaches the cursor: hence one read of `_persist`. The state written is a
        snapshot taken under the cursor's lock, never a half-applied ack.
        """
        persist = self._persist
        if persist is not None:
            persist(self)

    def snapshot(self) -> bytes:
        """Compact serialised state: ranges, never one record per acknowledged position."""
        with self._lock:
            state = {
                "mark_delete": list(self._mark_delete),
                "ranges": [[*start, *end] for start, end in self._acked],
                "batch_acks": [[*position, words] for position, words in self._batch_acks.items()],
                "properties": self._properties,
            }
            return json.dumps(state, separators=(",", ":")).encode()

    def restore(self, snapshot: bytes) -> None:
        state = json.loads(snapshot)
        with self._lock:
            self._mark_delete = _stored_position(*state["mark_delete"])
            self._acked.clear()
            for l1, e1, l2, e2 in state["ranges"]:
                self._acked.add_range(_stored_position(l1, e1), _stored_position(l2, e2))
            self._batch_acks = {
                _stored_position(ledger, entry): words for ledger, entry, words in state["batch_acks"]
            }
            self._properties = dict(state["properties"])


def _stored_position(ledger_id: int, entry_id: int) -> Position:
    """A position as persisted. Earlier brokers stored a cumulative ack of (L, -1) as
    (L, 2^64-1), acknowledging all of ledger L; reading it signed gives back what the client
    meant, so the messages it hid are delivered again."""
    return Position(to_signed64(ledger_id), to_signed64(entry_id))
