"""The broker's side of a transaction's end: the coordinator's participants are topics.

Built only when `transactionCoordinatorEnabled`: ending a transaction on a partition
stores its marker there (PersistentTopic.end_transaction); a partition deleted since
holds nothing to mark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.transactions.coordinator import TransactionCoordinator
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import COMMIT, TxnId

if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService

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

    async def end_on_partition(self, topic: str, txn: TxnId, action: int) -> None:
        loaded = self._topic(topic)
        if loaded is not None:
            await loaded.end_transaction(txn, action)

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnId, action: int) -> None:
        """Apply or release what the transaction acknowledged; a subscription deleted since
        has nothing left to apply it to."""
        loaded = self._topic(topic)
        held = loaded.subscriptions.get(subscription) if loaded is not None else None
        if held is not None:
            held.end_txn_acks(txn, commit=action == COMMIT)


def new_coordinator(service: BrokerService) -> TransactionCoordinator:
    return TransactionCoordinator(COORDINATOR_ID, service.metadata, TopicParticipants(service),
                                  service.config.maxActiveTransactionsPerCoordinator)

