"""Compacted reads: what a `read_compacted` consumer is sent, and what GetLastMessageId
and seek by time answer it.

Such a consumer reads the compacted ledger up to the horizon, then the topic after it.
A compacted batch goes out with an `ack_set` whose bits are its retained indexes (field
31, intersected with what the subscription acknowledged), so the official client skips
the placeholder slots as it skips acknowledged ones; the payload is never opened here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.consumer import DispatchEntry
from magnetar.storage import Position
from magnetar.wire.message_id import MessageId, ack_set_from_indexes, unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic


def restrict_to_retained(entry: DispatchEntry) -> None:
    """Narrow a compacted entry's ack_set and message count to its retained messages."""
    metadata = entry.metadata
    if metadata is None or not metadata.compacted_batch_indexes or not metadata.HasField("num_messages_in_batch"):
        return
    size = metadata.num_messages_in_batch
    retained = set(metadata.compacted_batch_indexes)
    if entry.ack_set:
        retained &= set(unacked_indexes(entry.ack_set, size))
    if not retained:  # every retained message is acknowledged: nothing should have been read
        retained = set(metadata.compacted_batch_indexes)
    kept = sorted(i for i in retained if 0 <= i < size)
    entry.ack_set = ack_set_from_indexes(kept, size)
    entry.num_messages = max(len(kept), 1)


class CompactedReader:
    """Mixed into the Exclusive/Failover dispatcher: reads the compacted ledger for a
    `read_compacted` active consumer while its read position is within the horizon."""

    def _compacted_horizon(self) -> Position | None:
        active = getattr(self, "active", None)
        if active is None or not active.read_compacted:
            return None
        topic: PersistentTopic = self.subscription.topic  # type: ignore[attr-defined]
        return topic.compaction_service.last_compacted_position()

    def _read_stored(self, start: Position, count: int) -> list[tuple[Position, bytes | None]]:
        horizon = self._compacted_horizon()
        self._compacted_positions: set[Position] = set()
        if horizon is not None and start <= horizon:
            topic: PersistentTopic = self.subscription.topic  # type: ignore[attr-defined]
            run = topic.compaction_service.read_compacted_entries(start, count)
            if run:
                self._compacted_positions = {position for position, _data in run}
                return run  # type: ignore[return-value]
            start = self.read_position = topic.ledger.next_position(horizon)  # type: ignore[attr-defined]
        return super()._read_stored(start, count)  # type: ignore[misc]

    def _entry(self, position: Position, data: bytes | None) -> DispatchEntry | None:
        entry = super()._entry(position, data)  # type: ignore[misc]
        if entry is not None and position in getattr(self, "_compacted_positions", ()):
            restrict_to_retained(entry)
        return entry


def compacted_last_message_id(topic: PersistentTopic) -> pb.MessageIdData | None:
    """GetLastMessageId for a compacted reader when the horizon covers the whole topic:
    the last message it can receive, from the compacted ledger's last MessageMetadata.
    None when the topic has a tail after the horizon (or was never compacted): the
    topic's own last id is then the answer."""
    service = topic.compaction_service
    horizon = service.last_compacted_position()
    if horizon is None:
        return None
    last = topic.ledger.last_confirmed_position
    if last is not None and last > horizon:
        return None
    found = service.last_message_position()
    return MessageId(found.ledger_id, found.entry_id, topic.partition, found.batch_index).to_proto()


def compacted_position_by_time(topic: PersistentTopic, timestamp: int) -> Position:
    """Seek by time on the compacted view: the first compacted entry at or after the time,
    else the first entry of the topic after the horizon at or after it."""
    service = topic.compaction_service
    horizon = service.last_compacted_position()
    in_topic = topic.find_position_by_time(timestamp)
    if horizon is None:
        return in_topic
    found = service.find_position_by_publish_time(timestamp)
    if found is not None:
        return found
    return max(in_topic, topic.ledger.next_position(horizon))
