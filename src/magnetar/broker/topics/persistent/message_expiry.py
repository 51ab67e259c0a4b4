"""Message TTL: acknowledge on every subscription what is older than the TTL.

The boundary is found with the same prefix-only binary search as seek by
time, so an expiry pass costs O(log n) entry reads per topic, not a scan.
When it runs is monitors.message_expiry's.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from magnetar.storage import Position
from magnetar.storage.message_finder import find_first_at_or_after

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic


def last_expired_position(topic: PersistentTopic, age_seconds: float, now_ms: int | None = None) -> Position:
    """The last entry older than `age_seconds` (the position before the first entry when none is)."""
    cutoff = (now_ms if now_ms is not None else time.time_ns() // 1_000_000) - int(age_seconds * 1000)
    found = find_first_at_or_after(topic.ledger, cutoff).position
    boundary = found if found is not None else topic.next_publish_position()
    return topic.ledger.previous_position(boundary)


def expire_messages(topic: PersistentTopic, ttl_seconds: int, now_ms: int | None = None) -> int:
    """Mark-delete every subscription up to the last entry older than the TTL.

    Returns the number of subscriptions that moved.
    """
    last_expired = last_expired_position(topic, ttl_seconds, now_ms)
    moved = 0
    for subscription in topic.subscriptions.values():
        if last_expired > subscription.cursor.mark_delete_position:
            subscription.expire_up_to(last_expired)
            moved += 1
    return moved
