"""What a Kafka consumer reads of a partition beyond its stored entries: the compacted view of
a compacted topic, and the start DeleteRecords moved.

A topic whose cleanup.policy is compact (a compactionThreshold in effect, see
topic_settings) is read as Kafka reads a cleaned log: below the compaction horizon from the
compacted ledger, whose entries hold the records no later one with the same key replaced,
at their own offsets (the gaps are Kafka's too), and from the horizon on from the topic.
When the compacted view has nothing more below the horizon, the topic's own entries follow
(a later record of every key is among them), so a reader always reaches the end. Its log
start is the compacted view's first offset once retention has trimmed the entries under
it. Fetch and ListOffsets call `start_offset` and `read`; everything else reads the topic.
"""

from __future__ import annotations

from magnetar.broker.compaction import COMPACTION_THRESHOLD
from magnetar.broker.service.protocol_handlers import PartitionLog


def compacted(log: PartitionLog) -> bool:
    """Whether Kafka consumers read `log` compacted (its cleanup.policy is compact)."""
    return int(log.policy(COMPACTION_THRESHOLD) or 0) > 0


def start_offset(log: PartitionLog) -> int:
    """Kafka's log start offset: the first offset a consumer can read."""
    start = log.start_offset()
    if compacted(log):
        first = log.compacted_start()
        if first is not None:
            start = min(start, first)
    return max(start, log.deleted_before())


def read(log: PartitionLog, offset: int, max_bytes: int) -> list[bytes] | None:
    """Stored entries of the compacted view from `offset`; None when the topic's own entries
    are what a consumer reads there (not compacted, or at or past the horizon)."""
    if not compacted(log):
        return None
    end = log.compacted_end()
    if end is None or offset >= end:
        return None
    entries = log.read_compacted(offset, max(max_bytes, 1))
    if entries is None:  # still looking for `offset`: nothing this time, the next fetch goes on
        return []
    return entries or None
