"""`RawReader`: one topic partition's entries exactly as the broker sends them.

Like Pulsar's RawReader, it hands out whole entries (a batch stays one entry, compressed
payloads stay compressed) so a bulk reader can decode them its own way. It announces
broker-entry-metadata support, so a broker with
`exposingBrokerEntryMetadataToClientEnabled=true` keeps the PIP-70 prefix on each entry,
which then has the same layout as in the broker's storage.

The subscription is a non-durable Exclusive one with a unique name: reading leaves nothing
behind on the broker and never moves anybody's cursor.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

from magnetar.client.connection import ClientConnection, PulsarClientError
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.message_id import EARLIEST, MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand

DEFAULT_QUEUE_SIZE = 1000
"""Messages asked for at a time, as the official client's receiverQueueSize."""


@dataclass(frozen=True, slots=True)
class LastMessageId:
    last: MessageId
    """The topic partition's last entry (entry id -1 when it has none)."""
    mark_delete: MessageId | None
    """Where this reader's cursor stands: the entry before the next one it gets (None: not reported)."""

    @property
    def has_more(self) -> bool:
        """Whether an entry follows the reader's position, so reading one cannot block forever."""
        if self.last.entry_id < 0:
            return False
        if self.mark_delete is None:
            raise PulsarClientError("the broker does not report its cursor position (Pulsar before 2.8?)")
        return (self.mark_delete.ledger_id, self.mark_delete.entry_id) < (self.last.ledger_id, self.last.entry_id)


class RawReader:
    """A reader of raw entries, starting AT `start` (its entry included), or the first entry."""

    def __init__(
        self,
        conn: ClientConnection,
        topic: str,
        start: MessageId = EARLIEST,
        queue_size: int = DEFAULT_QUEUE_SIZE,
    ) -> None:
        self.conn = conn
        self.topic = topic
        self.queue_size = queue_size
        self.subscription = f"magnetar-reader-{uuid.uuid4().hex[:12]}"
        self.consumer_id = conn.new_consumer_id()
        self._granted = 0
        """Messages the broker may still send us."""
        self._subscribe(start)

    def _subscribe(self, start: MessageId) -> None:
        # A batch index makes Pulsar's broker start at the entry itself rather than after
        # it (it cannot know how much of a batch was read); magnetar starts there anyway.
        start_id = MessageId(start.ledger_id, start.entry_id, batch_index=max(start.batch_index, 0))
        subscribe = pb.CommandSubscribe(
            topic=self.topic,
            subscription=self.subscription,
            subType=pb.CommandSubscribe.Exclusive,
            consumer_id=self.consumer_id,
            request_id=self.conn.new_request_id(),
            durable=False,
            start_message_id=(start if start.ledger_id < 0 else start_id).to_proto(),
            force_topic_creation=False,
        )
        self.conn.request(T(type=T.SUBSCRIBE, subscribe=subscribe))
        self._granted = 0

    def _flow(self) -> None:
        """Top the broker's allowance back up once half of it is used."""
        if self._granted <= self.queue_size // 2:
            permits = self.queue_size - self._granted
            self.conn.send(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=self.consumer_id, messagePermits=permits)))
            self._granted += permits

    def read_entry(self) -> tuple[MessageId, bytes]:
        """The next entry and its id; blocks (up to the operation timeout) until it comes."""
        self._flow()
        frame = self.conn.next_for(self.consumer_id)
        cmd = frame.command
        if cmd.type == T.CLOSE_CONSUMER:
            raise PulsarClientError(f"the broker closed the reader of {self.topic} (topic unloaded or broker stopping)")
        if cmd.type != T.MESSAGE or frame.payload is None:
            raise PulsarClientError(f"unexpected {T.Type.Name(cmd.type)} for the reader of {self.topic}")
        try:
            self._granted -= parse_message_metadata(frame.payload).num_messages_in_batch
        except WireError as exc:
            raise PulsarClientError(f"{self.topic}: malformed entry {cmd.message.message_id}: {exc}") from exc
        return MessageId.from_proto(cmd.message.message_id), frame.payload

    def last_message_id(self) -> LastMessageId:
        request = pb.CommandGetLastMessageId(consumer_id=self.consumer_id, request_id=self.conn.new_request_id())
        response = self.conn.request(T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=request))
        body = response.getLastMessageIdResponse
        mark = body.consumer_mark_delete_position if body.HasField("consumer_mark_delete_position") else None
        return LastMessageId(
            MessageId.from_proto(body.last_message_id), None if mark is None else MessageId.from_proto(mark)
        )

    def seek(self, *, message_id: MessageId | None = None, publish_time: int | None = None) -> None:
        """Move to an entry, or to the first entry at or after a time (broker time where the
        broker stamps it, else publish time). Entries already on their way are dropped."""
        seek = pb.CommandSeek(consumer_id=self.consumer_id, request_id=self.conn.new_request_id())
        if message_id is not None:
            seek.message_id.CopyFrom(message_id.to_proto())
        elif publish_time is not None:
            seek.message_publish_time = publish_time
        else:
            raise ValueError("seek needs a message id or a time")
        self.conn.request(T(type=T.SEEK, seek=seek))
        # The broker disconnects the reader to reset it; the subscription (and its new
        # position) stays, so subscribing again resumes there.
        while self.conn.next_for(self.consumer_id).command.type != T.CLOSE_CONSUMER:
            pass
        self._subscribe(message_id if message_id is not None else EARLIEST)

    def close(self) -> None:
        """Leave the subscription (a non-durable one then disappears); errors are moot here."""
        request = pb.CommandCloseConsumer(consumer_id=self.consumer_id, request_id=self.conn.new_request_id())
        with contextlib.suppress(PulsarClientError):
            self.conn.request(T(type=T.CLOSE_CONSUMER, close_consumer=request))
        self.conn.discard_pushed(self.consumer_id)
