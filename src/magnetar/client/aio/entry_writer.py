"""`send_entry` and `send_arrow`: a producer publishing entries it did not batch itself.

Writers of other formats (a Kafka record batch, an Arrow record batch) hand over a whole
payload; the producer adds the MessageMetadata it owns and sends it in order with its own
batches, taking one sequence id per message as a batch of that size would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from magnetar.client import errors
from magnetar.client.entries import check_count, entry_metadata
from magnetar.client.message_id import MessageId
from magnetar.client.outgoing import compressed
from magnetar.wire.entry import FORMAT_PROPERTY, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb


class EntryWriter:
    """Mixed into Producer (whose state it uses: sequence ids, the batch container, pending ops)."""

    closed: bool
    topic: str
    _batching: bool
    _container: Any
    _compression: int
    _next_seq: int
    _name: str | None
    _loop: asyncio.AbstractEventLoop

    def _flush_container(self) -> None: ...
    def _publish_time(self) -> int: ...
    def _max_message_size(self) -> int: ...
    def _add_op(self, op: Any) -> None: ...
    def _op(self, first: int, last: int, entry: bytes, completions: list, batch_size: int) -> Any: ...

    async def send_entry(self, payload: bytes, metadata_fields: Mapping[str, Any] | None = None,
                         num_messages: int = 1) -> MessageId:
        """Publish `payload` as one entry of `num_messages` messages, as it is (another format's writer).

        `metadata_fields` are MessageMetadata fields (``properties`` as a dict; ``entry.format``
        among them names a foreign format). The count is checked against the payload for the
        formats built in. Returns the id of the entry's first message.
        """
        if self.closed:
            raise errors.AlreadyClosed(f"producer on {self.topic} is closed")
        metadata = entry_metadata(metadata_fields, num_messages)
        check_count(metadata, bytes(payload), num_messages, self._max_message_size() * 64)
        return await self._send_whole(metadata, bytes(payload), num_messages)

    async def send_arrow(self, data: Any, max_rows: int | None = None,
                         sequence_id: int | None = None) -> list[MessageId]:
        """Publish a pyarrow Table or RecordBatch, one Arrow IPC entry per record batch (of at most
        `max_rows` rows), compressed as the producer's other entries. Returns each entry's first id.

        `sequence_id` numbers the first row (the rest follow), as `send(sequence_id=...)` does for
        one message: a writer that replays the same rows with the same ids is deduplicated."""
        from magnetar.formats.arrow_ipc import ARROW_FORMAT, encode_arrow_batches  # noqa: PLC0415 (pyarrow)

        if self.closed:
            raise errors.AlreadyClosed(f"producer on {self.topic} is closed")
        try:
            payloads = encode_arrow_batches(data, max_rows)
        except (ValueError, TypeError) as exc:
            raise errors.InvalidConfiguration(f"send_arrow: {exc}") from exc
        sends = []
        for payload, rows in payloads:
            metadata = entry_metadata({"properties": {FORMAT_PROPERTY: ARROW_FORMAT}}, rows)
            sends.append(self._send_whole(metadata, compressed(metadata, payload, self._compression), rows,
                                          sequence_id))
            if sequence_id is not None:
                sequence_id += rows
        return list(await asyncio.gather(*sends))

    def _send_whole(self, metadata: pb.MessageMetadata, payload: bytes, num_messages: int,
                    first: int | None = None) -> asyncio.Future[MessageId]:
        """Queue a ready entry behind whatever is batched, taking `num_messages` sequence ids
        (from `first` when the caller numbers its messages itself)."""
        if self._batching and len(self._container):
            self._flush_container()
        if first is None:
            first = self._next_seq
            self._next_seq += num_messages
        metadata.producer_name = self._name or ""
        metadata.sequence_id = first
        metadata.publish_time = self._publish_time()
        entry = build_entry(metadata, payload)
        future: asyncio.Future[MessageId] = self._loop.create_future()
        if len(entry) > self._max_message_size():
            future.set_exception(errors.MessageTooBig(f"an entry of {len(entry)} bytes exceeds the broker's limit"))
            return future
        op = self._op(first, first + num_messages - 1, entry, [future], num_messages)
        op.num_messages = 0  # not counted against max_pending_messages: the caller awaits each entry
        self._add_op(op)
        return future
