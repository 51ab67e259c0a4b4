"""A pulsar-spark message id offset (message_ids) found in its topic: the index it stands for."""

from __future__ import annotations

from typing import Protocol

from magnetar.spark.offsets import LATEST_INDEX, OffsetSpec, TopicPartition
from magnetar.spark.option_errors import fail
from magnetar.spark.storage_reader import first_index, last_index


class EntryFinder(Protocol):
    def entry_at(self, tp: TopicPartition, ledger_id: int, entry_id: int) -> tuple[tuple[int, int], bytes] | None:
        """The entry at (ledger, entry), or the first after it, with its position; None past the end."""


def requested_index(spec: OffsetSpec, tp: TopicPartition, topics: EntryFinder, *, ending: bool) -> int:
    """The index `spec` asks for in `tp`, a message id looked up in the topic: the id's own
    message to start at, the index after its entry to end before."""
    message_id = spec.message_id(tp)
    if message_id is None:
        return spec.index_for(tp)
    found = topics.entry_at(tp, message_id.ledger_id, message_id.entry_id)
    if found is None:
        return LATEST_INDEX  # past the end: nothing left to start at, nothing to stop before
    position, entry = found
    first, last = first_index(entry), last_index(entry)
    if first is None or last is None:
        option = "endingOffsets" if ending else "startingOffsets"
        fail(f"option {option!r}: the entry of message id {message_id} in {tp.storage_topic} has no broker index "
             "(AppendIndexMetadataInterceptor), which this source's offsets are")
    if ending:
        return last + 1
    exact = position == (message_id.ledger_id, message_id.entry_id)
    return first + max(message_id.batch_index, 0) if exact else first
