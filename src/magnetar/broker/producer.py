"""A producer on a topic, and the in-order delivery of its receipts.

The official client insists that SEND_RECEIPT and SEND_ERROR arrive in the
order it sent, and closes the connection otherwise. Storage completes appends
in order, but a SEND refused at once (bad checksum) would overtake receipts
still waiting for fsync; so every SEND takes a slot in a queue and answers
leave from its head only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.deduplication import DupStatus, MessageDeduplication
from magnetar.broker.stats import MessageCounter
from magnetar.storage import Position, StorageFullError
from magnetar.wire import commands
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.abstract_topic import AbstractTopic
    from magnetar.broker.connection import ServerCnx


@dataclass(slots=True)
class _PendingSend:
    sequence_id: int
    highest_sequence_id: int
    answer: bytes | None = None


class Producer:
    def __init__(
        self, topic: AbstractTopic, cnx: ServerCnx, producer_id: int, name: str, access_mode: int,
        topic_epoch: int | None = None,
    ) -> None:
        self.topic = topic
        self.cnx = cnx
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.topic_epoch = topic_epoch
        self.closed = False
        self.inbound = MessageCounter()
        self._pending: deque[_PendingSend] = deque()

    def publish(self, sequence_id: int, highest_sequence_id: int, entry: bytes, num_messages: int,
                batch_size: int) -> None:
        dedup = self.topic.deduplication
        if dedup is not None:
            status = dedup.check(self.name, sequence_id, highest_sequence_id)
            if status is DupStatus.DUPLICATE:  # stored before: acknowledged again, not stored again
                self._answer(_PendingSend(sequence_id, highest_sequence_id), Position(-1, -1))
                return
            if status is DupStatus.UNKNOWN:
                self.refuse(sequence_id, pb.PersistenceError,
                            "Cannot determine whether the message is a duplicate at this time")
                return
        slot = _PendingSend(sequence_id, highest_sequence_id)
        self._pending.append(slot)
        self.inbound.add(num_messages, len(entry))
        self.topic.publish(entry, num_messages, batch_size, lambda pos, exc: self._stored(slot, pos, exc, dedup))

    def _answer(self, slot: _PendingSend, position: Position) -> None:
        slot.answer = commands.send_receipt(
            self.producer_id, slot.sequence_id, position.ledger_id, position.entry_id, slot.highest_sequence_id)
        self._pending.append(slot)
        self._flush()

    def refuse(self, sequence_id: int, code: int, message: str) -> None:
        slot = _PendingSend(sequence_id, sequence_id)
        slot.answer = commands.send_error(self.producer_id, sequence_id, code, message)
        self._pending.append(slot)
        self._flush()

    def _stored(self, slot: _PendingSend, position: Position | None, exc: BaseException | None,
                dedup: MessageDeduplication | None = None) -> None:
        if position is None or exc is not None:
            if dedup is not None:
                dedup.forget_pushed(self.name)
            reason = "the broker's disk is full" if isinstance(exc, StorageFullError) else "could not store the message"
            slot.answer = commands.send_error(self.producer_id, slot.sequence_id, pb.PersistenceError,
                                              f"{reason}: {exc}")
        else:
            if dedup is not None:
                dedup.persisted(self.name, slot.highest_sequence_id, position)
            slot.answer = commands.send_receipt(
                self.producer_id, slot.sequence_id, position.ledger_id, position.entry_id, slot.highest_sequence_id
            )
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        while pending and pending[0].answer is not None:
            answer = pending.popleft().answer
            if not self.closed:
                self.cnx.send(answer)  # type: ignore[arg-type]

    def stats(self) -> dict[str, object]:
        return {
            "producerId": self.producer_id,
            "producerName": self.name,
            "accessMode": pb.ProducerAccessMode.Name(self.access_mode),
            "msgRateIn": self.inbound.message_rate,
            "msgThroughputIn": self.inbound.byte_rate,
            "averageMsgSize": self.inbound.average_size,
            "address": self.cnx.remote,
        }
