"""The snapshots one replicated subscription keeps ahead of its mark-delete position."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from magnetar.storage import Position


class CachedSnapshot(NamedTuple):
    position: Position
    """The local position the snapshot is good for: its last RESPONSE marker's."""
    clusters: Mapping[str, tuple[int, int]]


class SnapshotCache:
    """At most `max_cached` snapshots in position order. A full cache drops the snapshot
    whose neighbours lie closest together (Pulsar's choice too): what is kept stays spread
    over the backlog, so a consumer far behind still finds one near its position, and the
    newest, which a caught-up consumer needs, is never the one dropped."""

    def __init__(self, max_cached: int, distance: Callable[[Position, Position], int]) -> None:
        self._max = max(max_cached, 1)
        self._distance = distance
        self._snapshots: list[CachedSnapshot] = []

    def __len__(self) -> int:
        return len(self._snapshots)

    def __iter__(self) -> Iterator[CachedSnapshot]:
        return iter(self._snapshots)

    def add(self, snapshot: CachedSnapshot) -> None:
        if self._snapshots and snapshot.position <= self._snapshots[-1].position:
            self._snapshots.clear()  # the topic's positions went back (a reset ledger): start over
        self._snapshots.append(snapshot)
        if len(self._snapshots) > self._max:
            self._drop_one()

    def _drop_one(self) -> None:
        snapshots = self._snapshots
        if len(snapshots) < 3:
            del snapshots[0]
            return
        gaps = [self._distance(snapshots[i - 1].position, snapshots[i + 1].position)
                for i in range(1, len(snapshots) - 1)]
        del snapshots[1 + gaps.index(min(gaps))]

    def advance(self, mark_delete: Position) -> CachedSnapshot | None:
        """The newest snapshot the mark-delete position has reached, if any; it and the
        older ones leave the cache (an UPDATE for them would move nothing further)."""
        reached = 0
        while reached < len(self._snapshots) and self._snapshots[reached].position <= mark_delete:
            reached += 1
        if not reached:
            return None
        newest = self._snapshots[reached - 1]
        del self._snapshots[:reached]
        return newest
