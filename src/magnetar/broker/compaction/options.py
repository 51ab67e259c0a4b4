"""What a compaction is asked and what it answers: shared by the service that starts one
(service.py) and the compactor that does it (compactor.py), which imports nothing else of
the service and is itself imported only when a topic is first compacted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

Progress = Callable[[float], None]
"""Called with the fraction done (0..1), from the compacting thread."""


class TransactionView(Protocol):
    """What compaction must leave out of a topic that holds transactions (PIP-31): the
    topic's transaction buffer (broker.transactions.buffer) is one."""

    @property
    def max_read_position(self) -> Position | None:
        """The first entry of a transaction still open (None: none is)."""
        ...

    def hides(self, metadata: pb.MessageMetadata) -> bool:
        """A marker, or a message of an aborted transaction."""
        ...


@dataclass(slots=True)
class CompactionOptions:
    retain_null_key: bool = False
    max_message_size: int = 5 * 1024 * 1024
    hidden: Callable[[pb.MessageMetadata], bool] | None = None
    """Entries left out whatever their keys (the aborted messages of a transactional topic)."""


@dataclass(slots=True)
class CompactionResult:
    horizon: Position
    entries_read: int
    messages_read: int
    entries_written: int
    keys: int
