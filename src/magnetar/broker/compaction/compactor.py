"""Two-phase compaction of one topic partition (the shape of Pulsar's TwoPhaseCompactor).

Phase one reads the compacted view up to the horizon (the previous compacted ledger, then
the topic after the previous horizon; so a second compaction only rereads what is new)
and keeps, per key, the id of its latest message; a message that deletes its key removes
it. Phase two reads the same entries again from the first retained one and writes, in
their original order and under their original positions, only what phase one retained.

An entry in Kafka's format (one record batch, PIP-96) is compacted as Kafka's cleaner
would: keyed by its records' keys, a null value deleting, the batch rewritten with the
surviving records at their own offsets.

Memory holds one id per live key, never one per message. Runs on a worker thread: it
touches storage and wire only, never the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from magnetar.broker.compaction.options import CompactionOptions, CompactionResult, Progress
from magnetar.formats.kafka_records import KAFKA_FORMAT, compaction_records, retain_records
from magnetar.formats.payload import CorruptPayloadError
from magnetar.storage import Position
from magnetar.storage.compacted_ledger import CompactedLedgerWriter
from magnetar.wire.compaction import (
    CompactionMessage,
    compaction_messages,
    is_readable_batch,
    mark_retained,
    rebatch,
    with_payload,
)
from magnetar.wire.entry import entry_format, parse_entry
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

__all__ = ["CompactionCancelled", "CompactionOptions", "CompactionResult", "PhaseOne", "Progress", "compact",
           "compacted_entry", "entry_messages"]
log = logging.getLogger(__name__)

#: (position, batch index); -1 for a message that is a whole entry.
MessageRef = tuple[Position, int]
EntrySource = Callable[[Position | None], Iterator[tuple[Position, bytes]]]
"""Entries of the compacted view from a position (None: from its start) to the horizon."""


class CompactionCancelled(Exception):
    """The topic was closed while compacting; nothing was put in force."""


def entry_messages(position: Position, data: bytes, options: CompactionOptions
              ) -> tuple[pb.MessageMetadata | None, list]:
    """An entry's metadata and live messages; (None, []) for one compaction drops: a server
    marker, or bytes that do not parse (logged: they could never be delivered either)."""
    try:
        parsed = parse_entry(data)
        if parsed.metadata.HasField("marker_type") or (options.hidden is not None and options.hidden(parsed.metadata)):
            return None, []
        if entry_format(parsed.metadata) == KAFKA_FORMAT:  # one Kafka record batch (PIP-96): its records
            return parsed.metadata, [CompactionMessage(*record) for record in compaction_records(parsed.payload)]
        return parsed.metadata, compaction_messages(parsed.metadata, parsed.payload,
                                                    max_size=options.max_message_size)
    except (WireError, CorruptPayloadError) as exc:
        log.warning("compaction skips unreadable entry %s: %s", position, exc)
        return None, []


class PhaseOne:
    """Phase one's state: the latest id of every live key."""

    def __init__(self, options: CompactionOptions) -> None:
        self.options = options
        self.latest: dict[str, MessageRef] = {}
        self.keyless = False
        self.entries = 0
        self.messages = 0

    def add(self, position: Position, data: bytes) -> None:
        self.entries += 1
        _metadata, messages = entry_messages(position, data, self.options)
        latest = self.latest
        for index, key, deletes in messages:
            self.messages += 1
            if key is None:
                self.keyless = self.keyless or (self.options.retain_null_key and not deletes)
            elif deletes:
                latest.pop(key, None)
            else:
                latest[key] = (position, index)

    def first_retained(self) -> Position | None:
        """Where phase two starts reading: nothing before it is kept."""
        if self.keyless:
            return None
        return min((ref[0] for ref in self.latest.values()), default=None)


def _kept(messages: list, position: Position, latest: dict[str, MessageRef], retain_null_key: bool) -> list[int]:
    kept = []
    for index, key, deletes in messages:
        if deletes:
            continue
        if key is None:
            if retain_null_key:
                kept.append(index)
        elif latest.get(key) == (position, index):
            kept.append(index)
    return kept


def compacted_entry(position: Position, data: bytes, state: PhaseOne) -> bytes | None:
    """What phase two writes for one entry: None (dropped), the entry with field 31 set
    (kept whole; an encrypted batch), or a rebatched entry (kept in part)."""
    options = state.options
    metadata, messages = entry_messages(position, data, options)
    if metadata is None:
        return None
    kept = _kept(messages, position, state.latest, options.retain_null_key)
    if not kept:
        return None
    if not metadata.HasField("num_messages_in_batch"):
        return data
    if entry_format(metadata) == KAFKA_FORMAT:
        if len(kept) == len(messages):
            return mark_retained(data, kept)
        return with_payload(data, kept, retain_records(parse_entry(data).payload, kept) or b"")
    if not is_readable_batch(metadata):  # encrypted: the whole batch under its first key
        return mark_retained(data, range(metadata.num_messages_in_batch))
    if len(kept) == len(messages):
        return mark_retained(data, kept)
    return rebatch(data, kept, max_size=options.max_message_size)


def compact(source: EntrySource, writer: CompactedLedgerWriter, horizon: Position, options: CompactionOptions,
            total_entries: int, progress: Progress | None = None,
            cancelled: Callable[[], bool] = lambda: False) -> CompactionResult:
    """Run both phases; the caller commits `writer` (or aborts it) afterwards."""
    state = PhaseOne(options)
    report = progress or (lambda _fraction: None)
    total = max(total_entries, 1)
    for position, data in source(None):
        state.add(position, data)
        if state.entries % 1024 == 0:
            _check(cancelled)
            report(min(state.entries / total, 1.0) / 2)
    log.info("compaction phase one: %d entries, %d messages, %d keys up to %s", state.entries, state.messages,
             len(state.latest), horizon)
    report(0.5)
    start = state.first_retained()
    if state.latest or state.keyless:
        log.info("compaction phase two: writing from %s", start)
        for done, (position, data) in enumerate(source(start), 1):
            entry = compacted_entry(position, data, state)
            if entry is not None:
                writer.add(position, entry)
            if done % 1024 == 0:
                _check(cancelled)
                report(0.5 + min(done / total, 1.0) / 2)
    return CompactionResult(horizon, state.entries, state.messages, writer.entries, len(state.latest))


def _check(cancelled: Callable[[], bool]) -> None:
    if cancelled():
        raise CompactionCancelled("the topic closed during compaction")

