"""`TransactionsAdmin`: pulsar-admin's `transactions` verbs over /admin/v3/transactions (PIP-31),
for scripts and `magnetar admin transactions`, on AdminClient's transport (authentication,
TLS, Pulsar's errors). Pulsar's own is PulsarAdmin.transactions()."""

from __future__ import annotations

from typing import Any

from magnetar.admin_client.client import AdminClient, _seg
from magnetar.wire.topic_name import TopicName

BASE = "/admin/v3/transactions"


def _topic(topic: str) -> str:
    name = TopicName.parse(topic)
    return f"{_seg(name.tenant)}/{_seg(name.namespace)}/{_seg(name.local_name)}"


class TransactionsAdmin:
    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin

    def coordinator_stats(self, coordinator_id: int | None = None) -> dict[str, Any]:
        """By coordinator id (as a string), or the one coordinator's stats when `coordinator_id` is given."""
        return self.admin._json("GET", f"{BASE}/coordinatorStats", coordinatorId=coordinator_id)

    def transaction_metadata(self, most: int, least: int) -> dict[str, Any]:
        return self.admin._json("GET", f"{BASE}/transactionMetadata/{most}/{least}")

    def slow_transactions(self, timeout_ms: int, coordinator_id: int | None = None) -> dict[str, Any]:
        """Transactions open for longer than `timeout_ms`, by transaction id."""
        return self.admin._json("GET", f"{BASE}/slowTransactions/{timeout_ms}", coordinatorId=coordinator_id)

    def transaction_buffer_stats(self, topic: str, low_water_marks: bool = False) -> dict[str, Any]:
        return self.admin._json("GET", f"{BASE}/transactionBufferStats/{_topic(topic)}",
                                lowWaterMarks=low_water_marks or None)

    def pending_ack_stats(self, topic: str, subscription: str, low_water_marks: bool = False) -> dict[str, Any]:
        return self.admin._json("GET", f"{BASE}/pendingAckStats/{_topic(topic)}/{_seg(subscription)}",
                                lowWaterMarks=low_water_marks or None)

    def transaction_in_buffer_stats(self, most: int, least: int, topic: str) -> dict[str, Any]:
        return self.admin._json("GET", f"{BASE}/transactionInBufferStats/{_topic(topic)}/{most}/{least}")

    def transaction_in_pending_ack_stats(self, most: int, least: int, topic: str,
                                         subscription: str) -> dict[str, Any]:
        return self.admin._json(
            "GET", f"{BASE}/transactionInPendingAckStats/{_topic(topic)}/{_seg(subscription)}/{most}/{least}")
