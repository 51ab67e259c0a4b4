"""Acknowledged positions beyond a cursor's mark-delete point, kept as ranges."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sortedcontainers import SortedDict

from magnetar.storage.position import Position


class PositionRangeSet:
    """A set of positions stored as closed ranges [start, end], so a long run of acks costs one
    entry whatever its length.

    "Adjacent" is the managed ledger's notion, not entry_id + 1: the last entry of a ledger
    and the first of the next are adjacent. Hence `successor` and `count`, both answered by
    the managed ledger, instead of arithmetic on positions.
    """

    def __init__(
        self,
        successor: Callable[[Position], Position],
        count: Callable[[Position, Position], int],
    ) -> None:
        self._successor = successor
        self._count = count
        self._ranges: SortedDict = SortedDict()  # start -> (end, number of positions)
        self._size = 0

    def __len__(self) -> int:
        """Number of positions in the set (not of ranges)."""
        return self._size

    def __iter__(self) -> Iterator[tuple[Position, Position]]:
        for start, (end, _) in self._ranges.items():
            yield start, end

    def range_containing(self, position: Position) -> tuple[Position, Position] | None:
        index = self._ranges.bisect_right(position) - 1
        if index < 0:
            return None
        start, (end, _) = self._ranges.peekitem(index)
        return (start, end) if position <= end else None

    def __contains__(self, position: object) -> bool:
        return isinstance(position, Position) and self.range_containing(position) is not None

    def add(self, position: Position) -> bool:
        """Add one position, merging with adjacent ranges; False if it was already there."""
        index = self._ranges.bisect_right(position) - 1
        start, end, size = position, position, 1
        if index >= 0:
            prev_start, (prev_end, prev_size) = self._ranges.peekitem(index)
            if position <= prev_end:
                return False
            if self._successor(prev_end) == position:
                start, size = prev_start, prev_size + 1
        if index + 1 < len(self._ranges):
            next_start, (next_end, next_size) = self._ranges.peekitem(index + 1)
            if self._successor(position) == next_start:
                del self._ranges[next_start]
                end, size = next_end, size + next_size
        self._ranges[start] = (end, size)
        self._size += 1
        return True

    def add_range(self, start: Position, end: Position) -> None:
        """Restore a persisted range; ranges must come in order and not touch."""
        size = self._count(start, end)
        self._ranges[start] = (end, size)
        self._size += size

    def pop_first_if_starts_at(self, position: Position) -> Position | None:
        """Remove the first range if it begins at `position` and return its end."""
        if not self._ranges or self._ranges.peekitem(0)[0] != position:
            return None
        _, (end, size) = self._ranges.popitem(0)
        self._size -= size
        return end

    def remove_through(self, position: Position) -> None:
        """Drop every position <= `position` (they are now below the mark-delete point)."""
        while self._ranges:
            start, (end, size) = self._ranges.peekitem(0)
            if start > position:
                return
            del self._ranges[start]
            self._size -= size
            if end > position:
                rest = self._successor(position)
                rest_size = self._count(rest, end)
                self._ranges[rest] = (end, rest_size)
                self._size += rest_size
                return

    def clear(self) -> None:
        self._ranges.clear()
        self._size = 0
