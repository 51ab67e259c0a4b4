"""The address of an entry inside a managed ledger."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """(ledger_id, entry_id), ordered the way entries were appended.

    A NamedTuple rather than a dataclass: positions are created per entry on the hot read and
    append paths, and tuple construction, hashing and comparison are done in C.
    An entry_id of -1 means "just before the first entry of that ledger", which is how a
    cursor that has acknowledged nothing yet is expressed.
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"
