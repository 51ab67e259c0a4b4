"""One snapshot under construction: the remotes' answers to its REQUEST markers."""

from __future__ import annotations

import time
import uuid

from magnetar.storage import Position


class SnapshotBuilder:
    def __init__(self, remotes: set[str], timeout: float) -> None:
        self.snapshot_id = str(uuid.uuid4())
        self._remotes = frozenset(remotes)
        self._missing = set(remotes)
        self.responses: dict[str, tuple[int, int]] = {}
        self._rounds_left = 2 if len(remotes) > 1 else 1
        """With several remotes, what one sent another while the first round went round is
        only covered by a second one (Pulsar's two rounds)."""
        self._deadline = time.monotonic() + timeout
        self.completing = False
        """The SNAPSHOT marker is being written: later answers change nothing."""

    @property
    def timed_out(self) -> bool:
        return time.monotonic() > self._deadline

    def received(self, cluster: str, position: tuple[int, int]) -> str | None:
        """A remote's RESPONSE: "again" when a round is complete and another must start,
        "done" when the snapshot is complete, else None (waiting, or not one of ours)."""
        if cluster not in self._remotes or self.completing:
            return None
        self.responses.setdefault(cluster, position)  # the first round's answer is the snapshot's
        self._missing.discard(cluster)
        if self._missing:
            return None
        self._rounds_left -= 1
        if self._rounds_left:
            self._missing = set(self._remotes)
            return "again"
        self.completing = True
        return "done"


def position_pair(position: Position) -> tuple[int, int]:
    return position.ledger_id, position.entry_id
