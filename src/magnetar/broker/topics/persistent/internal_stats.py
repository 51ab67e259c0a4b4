"""A persistent topic's storage as Pulsar's `internalStats` shows it: ledgers and cursors.

Positions read `ledger:entry`, and acknowledged ranges beyond the mark-delete position
as Pulsar prints them, `(before-first..last]`, so tools that parse Pulsar's output read
ours.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from magnetar.broker.topics.replicators import has_replicator_prefix
from magnetar.storage import Position

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic


def internal_stats(topic: PersistentTopic) -> dict[str, object]:
    ledger = topic.ledger
    ledgers = ledger.ledgers
    last = ledgers[-1] if ledgers else None
    last_confirmed = ledger.last_confirmed_position
    return {
        "numberOfEntries": ledger.number_of_entries(),
        "totalSize": ledger.total_size_bytes(),
        "currentLedgerEntries": last.entries if last else 0,
        "currentLedgerSize": last.size if last else 0,
        "lastLedgerCreatedTimestamp": _time(last.created_at) if last else "",
        "lastConfirmedEntry": str(last_confirmed) if last_confirmed is not None else "-1:-1",
        "state": "LedgerOpened",
        "ledgers": [{"ledgerId": info.ledger_id, "entries": info.entries, "size": info.size,
                     "offloaded": False, "underReplicated": False} for info in ledgers],
        "cursors": {**{name: _cursor(topic, sub) for name, sub in topic.subscriptions.items()},
                    **_replicator_cursors(topic)},
        "compactedLedger": _compacted_ledger(topic),
    }


def _compacted_ledger(topic: PersistentTopic) -> dict[str, object]:
    """The compacted ledger in force (built-in service), as Pulsar reports it; -1s without one."""
    store = getattr(topic.compaction_service, "store", None)
    current = store.current if store is not None else None
    info = current.info if current is not None else None
    return {"ledgerId": info.ledger_id if info else -1, "entries": info.entries if info else -1,
            "size": info.size if info else -1, "offloaded": False, "underReplicated": False}


def _cursor(topic: PersistentTopic, subscription: PersistentSubscription) -> dict[str, object]:
    cursor = subscription.cursor
    ranges = cursor.individually_deleted
    dispatcher = subscription.dispatcher
    read_position = getattr(dispatcher, "read_position", None) or subscription.first_unacked_position()
    return {
        "markDeletePosition": str(cursor.mark_delete_position),
        "readPosition": str(read_position),
        "waitingReadOp": False,
        "pendingReadOps": 0,
        "cursorLedger": -1,
        "cursorLedgerLastEntry": -1,
        "individuallyDeletedMessages": _ranges(topic, ranges),
        "state": "Open",
        "active": bool(subscription.consumers),
        "numberOfEntriesSinceFirstNotAckedMessage": subscription.backlog() + sum(
            topic.ledger.entries_between(start, end) for start, end in ranges),
        "totalNonContiguousDeletedMessagesRange": len(ranges),
        "properties": {key: value for key, value in cursor.properties.items() if not key.startswith("#")},
    }


def _replicator_cursors(topic: PersistentTopic) -> dict[str, dict[str, object]]:
    """Replicators' cursors (`pulsar.repl.<remote>`), listed among the cursors as Pulsar lists them."""
    prefix = topic.context.config.replicatorPrefix
    shown = {}
    for name, cursor in topic.ledger.cursors.items():
        if has_replicator_prefix(name, prefix):
            ranges = cursor.individually_deleted
            shown[name] = {
                "markDeletePosition": str(cursor.mark_delete_position),
                "readPosition": str(topic.ledger.next_position(cursor.mark_delete_position)),
                "individuallyDeletedMessages": _ranges(topic, ranges),
                "state": "Open",
                "active": name.removeprefix(prefix + ".") in topic.replicators,
                "numberOfEntriesSinceFirstNotAckedMessage": cursor.num_unacked_entries(),
                "totalNonContiguousDeletedMessagesRange": len(ranges),
            }
    return shown


def _ranges(topic: PersistentTopic, ranges: list[tuple[Position, Position]]) -> str:
    shown = ",".join(f"({topic.ledger.previous_position(start)}..{end}]" for start, end in ranges)
    return f"[{shown}]"


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
