"""A producer on a topic, and the in-order delivery of its receipts.

The official client insists that SEND_RECEIPT and SEND_ERROR arrive in the
order it sent, and closes the connection otherwise. Storage completes appends
in order, but a SEND refused at once (bad checksum) would overtake receipts
still waiting for fsync; so every SEND takes a slot in a queue and answers
leave from its head only.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from magnetar.broker.deduplication import DupStatus, MessageDeduplication, replicated_identity
from magnetar.broker.topics.replicators import has_replicator_prefix
from magnetar.broker.topics.stats import MessageCounter
from magnetar.storage import Position, StorageFullError, WriteFailedError
from magnetar.wire import commands
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_topic import AbstractTopic
    from magnetar.broker.topics.cnx import TransportCnx
    from magnetar.wire.txn import TxnId

log = logging.getLogger(__name__)


_NOT_STORED_AGAIN = (-1, -1)
"""The position a duplicate's receipt carries: stored before, not stored again."""


class Send(NamedTuple):
    """A SEND that passed the checks, waiting for the rest of its read of the socket."""

    sequence_id: int
    highest_sequence_id: int
    entry: bytes
    num_messages: int
    batch_size: int


@dataclass(slots=True)
class _PendingGroup:
    """A place in the queue of answers: SENDs appended to the ledger in one call, whose
    receipts leave in one write, or a SEND answered at once (no sends kept)."""

    sends: list[Send]
    answer: bytes | None = None
    received_at: float = 0.0
    """When the read holding the SENDs arrived (0 for an answer given at once)."""
    recorded: asyncio.Future[None] | None = None
    """A transaction's messages: the coordinator's record naming this partition, written
    while they are (the answer waits for both; a record that failed makes them SEND_ERRORs)."""


class Producer:
    def __init__(
        self, topic: AbstractTopic, cnx: TransportCnx, producer_id: int, name: str, access_mode: int,
        topic_epoch: int | None = None,
    ) -> None:
        self.topic = topic
        self.cnx = cnx
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.topic_epoch = topic_epoch
        self.schema_version = b""
        """The registry's version of the producer's schema, told to the client on success."""
        self.closed = False
        self.inbound = MessageCounter()
        self._pending: deque[_PendingGroup] = deque()
        self._receipts = commands.ReceiptEncoder(producer_id)
        self._staged: list[Send] = []
        self.replicator = has_replicator_prefix(name, topic.context.config.replicatorPrefix)
        """Another cluster's replicator: deduplicated by source positions, not sequence ids."""
        self._publish_latency = topic.context.publish_latency
        self._staged_txn: TxnId | None = None
        """The transaction the staged SENDs belong to (they all belong to one, or to none)."""
        self._staged_recorded: asyncio.Future[None] | None = None

    def stage(self, send: Send) -> bool:
        """Hold a checked SEND until the connection's read is done (publish_staged); True
        for the first one held, so the connection knows to come back."""
        if self._staged_txn is not None:  # a transaction's messages were staged: they go first
            self.publish_staged()
        self._staged.append(send)
        return len(self._staged) == 1

    def stage_transactional(self, send: Send, txn: TxnId, recorded: asyncio.Future[None] | None) -> bool:
        """As `stage`, for a message of the open transaction `txn`: those of one transaction
        read together are stored as one group, as plain ones are. `recorded`: the
        coordinator's record naming this partition, not yet durable (None: it is); the
        messages are stored meanwhile, and answered once both are durable (a message whose
        transaction the log never named is aborted after a crash: see the coordinator's
        `found_open`)."""
        if self._staged and self._staged_txn != txn:
            self.publish_staged()
        self._staged.append(send)
        self._staged_txn = txn
        if recorded is not None:  # a later record is durable no sooner than an earlier one
            self._staged_recorded = recorded
        return len(self._staged) == 1

    def publish_staged(self) -> None:
        if self._staged:
            sends, self._staged = self._staged, []
            txn, self._staged_txn = self._staged_txn, None
            recorded, self._staged_recorded = self._staged_recorded, None
            self.publish_many(sends, txn, recorded)

    def publish_many(self, sends: list[Send], txn: TxnId | None = None,
                     recorded: asyncio.Future[None] | None = None) -> None:
        """Store SENDs read together (of one transaction `txn`, or of none): runs of new
        messages go to the topic as one group; a duplicate (answered at once) or an
        undecidable one (refused) ends a run, so answers keep the order the producer sent
        in. A transaction's messages are deduplicated as any others, as in Pulsar: a client
        that sends again after a lost receipt must not make the commit publish twice."""
        topic = self.topic
        if topic.terminated:
            self._refuse_terminated(sends)
            return
        dedup = topic.deduplication
        if dedup is None:
            self._publish_group(sends, None, txn, recorded)
            return
        run: list[Send] = []
        for send in sends:
            identity = self._dedup_identity(send)
            status = DupStatus.UNKNOWN if identity is None else dedup.check(*identity)
            if status is DupStatus.NEW:
                run.append(send)
                continue
            if run:
                self._publish_group(run, dedup, txn, recorded)
                run = []
            if status is DupStatus.DUPLICATE:  # stored before: acknowledged again, not stored again
                self._answer(self._receipts.encode((send,), (_NOT_STORED_AGAIN,)))
            else:
                self.refuse(send.sequence_id, pb.PersistenceError,
                            "Cannot determine whether the message is a duplicate at this time")
        if run:
            self._publish_group(run, dedup, txn, recorded)

    def _dedup_identity(self, send: Send) -> tuple[str, int, int] | None:
        """(producer, sequence id, highest sequence id) deduplication judges the SEND by:
        another cluster's replicator's entry by what its metadata says (read for these
        producers only; see deduplication.replicated_identity), anyone else's by its name and
        the SEND's ids."""
        if self.replicator:
            return replicated_identity(send.entry, self.name, self.cnx.repl_dedup_by_position)
        return self.name, send.sequence_id, send.highest_sequence_id

    def _refuse_terminated(self, sends: list[Send]) -> None:
        for send in sends:
            self.refuse(send.sequence_id, pb.TopicTerminatedError, f"Topic {self.topic.name} was already terminated")

    def _publish_group(self, sends: list[Send], dedup: MessageDeduplication | None, txn: TxnId | None = None,
                       recorded: asyncio.Future[None] | None = None) -> None:
        group = _PendingGroup(sends, None, self.cnx.read_at)
        self._pending.append(group)
        if recorded is not None:
            group.recorded = recorded
            recorded.add_done_callback(self._record_durable)
        entries = [send.entry for send in sends]
        counts = [send.num_messages for send in sends]
        self.inbound.add(sum(counts), sum(map(len, entries)))
        stored = functools.partial(self._stored, group, dedup)
        try:
            if txn is None:
                self.topic.publish_many(entries, counts, sends[-1].batch_size, stored)
            else:
                self.topic.publish_transactional(entries, counts, sends[-1].batch_size, txn, stored)
        except (StorageFullError, WriteFailedError) as exc:  # expected: answered as a failed write is
            self._stored(group, dedup, None, exc)
        except Exception as exc:
            log.exception("%s failed to store on %s", self.cnx, self.topic)
            self._stored(group, dedup, None, exc)

    @property
    def awaiting_receipts(self) -> bool:
        """SENDs handed to the topic whose answer has not gone out yet."""
        return bool(self._pending)

    def _record_durable(self, _recorded: asyncio.Future[None]) -> None:
        self._flush()

    def _answer(self, answer: bytes) -> None:
        self._pending.append(_PendingGroup([], answer))
        self._flush()

    def refuse(self, sequence_id: int, code: int, message: str) -> None:
        """Answer a SEND with an error, after the SENDs staged before it: answers leave in
        the order the producer sent."""
        self.publish_staged()
        self._answer(commands.send_error(self.producer_id, sequence_id, code, message))

    def _stored(self, group: _PendingGroup, dedup: MessageDeduplication | None, positions: list[Position] | None,
                exc: BaseException | None) -> None:
        sends = group.sends
        if positions is None or exc is not None:
            group.received_at = 0.0  # a failed write is no publish latency (as in Pulsar)
            if dedup is not None:
                for name in {identity[0] for send in sends if (identity := self._dedup_identity(send))}:
                    dedup.forget_pushed(name)
            if isinstance(exc, StorageFullError):
                # No SEND_ERROR, which the official client answers by dropping its connection:
                # the producer is closed and held (topics.full_disk), and its client sends
                # these again once it is let back in.
                self.topic.context.full_disk.write_failed(self.topic)
                group.answer = b""
            elif isinstance(exc, WriteFailedError):
                # No SEND_ERROR either: the topic is being closed and loaded again with a new
                # ledger (topics.failed_writes); its client sends these again on the new one.
                group.answer = b""
            else:
                group.answer = b"".join(
                    commands.send_error(self.producer_id, send.sequence_id, pb.PersistenceError,
                                        f"could not store the message: {exc}")
                    for send in sends)
        else:
            if dedup is not None:
                for send, position in zip(sends, positions, strict=True):
                    identity = self._dedup_identity(send)
                    if identity is not None:
                        dedup.persisted(identity[0], identity[2], position)
            group.answer = self._receipts.encode(sends, positions)
        self._flush()

    def _flush(self) -> None:
        pending = self._pending
        while pending and pending[0].answer is not None:
            group = pending[0]
            if group.recorded is not None:
                if not group.recorded.done():
                    return
                self._unless_recorded(group)
            pending.popleft()
            if not self.closed:
                self.cnx.send(group.answer)  # type: ignore[arg-type]
                if group.received_at:
                    self._publish_latency.observe((time.monotonic() - group.received_at) * 1000, len(group.sends))

    def _unless_recorded(self, group: _PendingGroup) -> None:
        """Stored messages of a transaction the log could not name are answered with an
        error (the coordinator lets that transaction abort only, so they are never seen)."""
        recorded = group.recorded
        failure = "cancelled" if recorded.cancelled() else recorded.exception()  # type: ignore[union-attr]
        if failure is not None and group.answer:
            group.answer = b"".join(
                commands.send_error(self.producer_id, send.sequence_id, pb.PersistenceError,
                                    f"the transaction log could not record {self.topic.name}: {failure}")
                for send in group.sends)

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
