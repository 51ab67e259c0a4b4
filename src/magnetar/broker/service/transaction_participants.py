"""The broker's side of a transaction's end: the coordinator's participants are topics.

Built only when `transactionCoordinatorEnabled`: ending a transaction on a partition
stores its marker there (PersistentTopic.end_transaction); a partition deleted since
holds nothing to mark. Every topic that loads holding open transactions is shown to the
coordinator, which may have some of them aborted there (TransactionCoordinator.found_open).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.transactions.coordinator import TransactionCoordinator
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import COMMIT, TxnId

if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService

log = logging.getLogger(__name__)
#: The one coordinator this broker runs: partition 0 of the coordinator-assign topic.
COORDINATOR_ID = 0


class TopicParticipants:
    def __init__(self, service: BrokerService) -> None:
        self._service = service

    def _topic(self, topic: str) -> PersistentTopic | None:
        try:
            loaded = self._service.get_topic(topic, create=False)
        except BrokerServiceError as exc:
            if exc.code == pb.TopicNotFound:
                return None
            raise
        return loaded if isinstance(loaded, PersistentTopic) else None

    def end_on_partition(self, topic: str, txn: TxnId, action: int) -> asyncio.Future[None] | None:
        """The marker, naming the transaction's producer (TxnMeta.producer) if it has one;
        none on a topic this call loads whose buffer holds the transaction's messages no more
        (see _marked_already)."""
        loaded_before = len(self._service.topics)
        loaded = self._topic(topic)
        if loaded is None:
            return None
        if len(self._service.topics) > loaded_before and _marked_already(loaded, txn):
            return None
        coordinator = self._service.transactions
        meta = coordinator.metadata(txn) if coordinator is not None else None
        return loaded.end_transaction(txn, action, meta.producer if meta is not None else "")

    def end_on_subscription(self, topic: str, subscription: str, txn: TxnId,
                            action: int) -> asyncio.Future[None] | None:
        """Apply or release what the transaction acknowledged; a subscription deleted since
        has nothing left to apply it to."""
        loaded = self._topic(topic)
        held = loaded.subscriptions.get(subscription) if loaded is not None else None
        return None if held is None else held.end_txn_acks(txn, commit=action == COMMIT)


    def loaded(self, topic: PersistentTopic) -> None:
        """A topic loaded: the transactions it holds open, shown to the coordinator."""
        buffer = topic.transaction_buffer
        coordinator = self._service.transactions
        if buffer is None or not buffer.ongoing or coordinator is None:
            return
        coordinator.found_open(str(topic.name), list(buffer.ongoing),
                               lambda txn, action: _end_on(topic, txn, action))


def _marked_already(topic: PersistentTopic, txn: TxnId) -> bool:
    """Whether a topic just loaded has `txn`'s marker (or no message of it) already: nothing
    is on its way to a topic loaded this moment, and its buffer, rebuilt from the ledger,
    holds every transaction with messages and no marker. A restart soon after a transaction
    ended finds the coordinator's record (deleted with the log's next write) and ends it
    again: its markers are not written twice."""
    buffer = topic.transaction_buffer
    return buffer is None or txn not in buffer.ongoing


def _end_on(topic: PersistentTopic, txn: TxnId, action: int) -> None:
    topic.end_transaction(txn, action).add_done_callback(
        lambda done: None if done.cancelled() or done.exception() is None else
        log.warning("[%s] transaction %s not ended here (%s): tried again at the next load", topic.name, txn,
                    done.exception()))


def new_coordinator(service: BrokerService) -> TransactionCoordinator:
    participants = TopicParticipants(service)
    service.topic_watchers.append(participants.loaded)
    return TransactionCoordinator(COORDINATOR_ID, service.metadata, participants,
                                  service.config.maxActiveTransactionsPerCoordinator)

