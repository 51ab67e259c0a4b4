"""What a compaction is asked and what it answers: shared by the service that starts one
(service.py) and the compactor that does it (compactor.py), which imports nothing else of
the service and is itself imported only when a topic is first compacted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from magnetar.storage import Position

Progress = Callable[[float], None]
"""Called with the fraction done (0..1), from the compacting thread."""


@dataclass(slots=True)
class CompactionOptions:
    retain_null_key: bool = False
    max_message_size: int = 5 * 1024 * 1024


@dataclass(slots=True)
class CompactionResult:
    horizon: Position
    entries_read: int
    messages_read: int
    entries_written: int
    keys: int
