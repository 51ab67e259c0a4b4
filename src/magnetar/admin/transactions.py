"""`/admin/v3/transactions/...`: Pulsar's transaction stats (PIP-31), as pulsar-admin's
`transactions` verbs read them.

The coordinator's (coordinatorStats, transactionMetadata, slowTransactions) are a super
user's, the stats of a topic's transaction buffer and a subscription's pending acks its
tenant admin's, as in Pulsar. With `transactionCoordinatorEnabled` off every route answers
503 naming the key, as Pulsar does. Nothing of the transactions package is imported: what is
read comes from the broker's coordinator and the topics' buffers, which exist only once used.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from magnetar import web
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.storage import Position
from magnetar.web import fail

if TYPE_CHECKING:
    from magnetar.broker.transactions.coordinator import TransactionCoordinator, TxnMeta

BASE = "/admin/v3/transactions"
TOPIC = "{tenant}/{namespace}/{topic}"
TXN = "{most}/{least}"
_DISABLED = "This Broker is not configured with transactionCoordinatorEnabled=true."


class TransactionsApi:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(f"{BASE}/coordinatorStats", self.coordinator_stats),
            web.get(f"{BASE}/transactionMetadata/{TXN}", self.transaction_metadata),
            web.get(f"{BASE}/slowTransactions/{{timeout}}", self.slow_transactions),
            web.get(f"{BASE}/transactionBufferStats/{TOPIC}", self.buffer_stats),
            web.get(f"{BASE}/pendingAckStats/{TOPIC}/{{subscription}}", self.pending_ack_stats),
            web.get(f"{BASE}/transactionInBufferStats/{TOPIC}/{TXN}", self.in_buffer_stats),
            web.get(f"{BASE}/transactionInPendingAckStats/{TOPIC}/{{subscription}}/{TXN}", self.in_pending_ack_stats),
        ]

    # -- the coordinator
    def _coordinator(self, request: web.Request | None = None) -> TransactionCoordinator:
        coordinator = self.service.transactions
        if coordinator is None:
            raise fail(503, _DISABLED)
        wanted = request.query.get("coordinatorId") if request is not None else None
        if wanted is not None and _integer(wanted, "coordinatorId") != coordinator.coordinator_id:
            raise fail(404, f"Transaction coordinator {wanted} not found")
        return coordinator

    async def coordinator_stats(self, request: web.Request) -> web.Response:
        """Pulsar's TransactionCoordinatorStats: by coordinator id, or the one asked for."""
        coordinator = self._coordinator(request)
        started, ended = coordinator.recovered
        unfinished = coordinator.unfinished()
        stats = {"state": "Ready" if ended else "Initializing", "leastSigBits": coordinator.last_id,
                 "lowWaterMark": (unfinished[0].txn.least - 1) if unfinished else coordinator.last_id,
                 "ongoingTxnSize": len(unfinished), "recoverStartTime": _ms(started), "recoverEndTime": _ms(ended)}
        if "coordinatorId" in request.query:
            return web.json_response(stats)
        return web.json_response({str(coordinator.coordinator_id): stats})

    async def transaction_metadata(self, request: web.Request) -> web.Response:
        coordinator = self._coordinator()
        txn = _txn_id(request)
        meta = coordinator.metadata(txn)
        if meta is None:
            raise fail(404, f"Transaction {txn} not found (ended, timed out or never opened)")
        return web.json_response(self._metadata_json(meta))

    async def slow_transactions(self, request: web.Request) -> web.Response:
        """Transactions open for longer than `timeout` milliseconds, by id."""
        coordinator = self._coordinator(request)
        timeout_ms = _integer(request.match_info["timeout"], "timeout")
        now_ms = _ms(time.time())
        slow = [meta for meta in coordinator.unfinished()
                if meta.opened_at and now_ms - _ms(meta.opened_at) > timeout_ms]
        return web.json_response({str(meta.txn): self._metadata_json(meta) for meta in slow})

    def _metadata_json(self, meta: TxnMeta) -> dict[str, Any]:
        """Pulsar's TransactionMetadata: what each partition and subscription holds of it."""
        produced = {topic: self._in_buffer(topic, meta.txn) for topic in meta.partitions}
        acked: dict[str, dict[str, dict[str, Any]]] = {}
        for topic, subscription in meta.subscriptions:
            acked.setdefault(topic, {})[subscription] = {"lowWaterMark": None}
        return {"txnId": str(meta.txn), "status": meta.status, "openTimestamp": _ms(meta.opened_at),
                "timeoutAt": _ms(meta.deadline), "owner": meta.owner, "producedPartitions": produced,
                "ackedPartitions": acked}

    def _in_buffer(self, topic: str, txn: Any) -> dict[str, Any]:
        """Pulsar's TransactionInBufferStats of a loaded topic (a topic not loaded tells nothing)."""
        loaded = self.service.topics.get(topic)
        buffer = getattr(loaded, "transaction_buffer", None)
        if buffer is None:
            return {"startPosition": None, "aborted": False}
        start = buffer.ongoing.get(txn)
        return {"startPosition": None if start is None else _position(start), "aborted": txn in buffer.aborted}

    # -- a topic's buffer and a subscription's pending acks
    def _topic(self, request: web.Request) -> PersistentTopic:
        self._coordinator()
        info = request.match_info
        name = self.service.parse_topic(f"persistent://{info['tenant']}/{info['namespace']}/{info['topic']}")
        topic = self.service.get_topic(str(name), create=False)
        if not isinstance(topic, PersistentTopic):
            raise fail(400, f"{name} is not a persistent topic")
        return topic

    async def buffer_stats(self, request: web.Request) -> web.Response:
        """Pulsar's TransactionBufferStats; a topic that never held a transaction has an
        empty buffer (it reads up to its last entry)."""
        topic = self._topic(request)
        buffer = topic.transaction_buffer
        limit = buffer.max_read_position if buffer is not None else None
        if limit is None:
            limit = topic.ledger.next_position(topic.ledger.last_confirmed_position or Position(-1, -1))
        return web.json_response({
            "state": "Ready", "maxReadPosition": _position(limit), "lastSnapshotTimestamps": 0,
            "ongoingTxnSize": 0 if buffer is None else len(buffer.ongoing),
            "totalAbortedTransactions": 0 if buffer is None else len(buffer.aborted),
            "recoverStartTime": 0, "recoverEndTime": 0,
            "lowWaterMarks": {} if "lowWaterMarks" in request.query else None})

    async def in_buffer_stats(self, request: web.Request) -> web.Response:
        txn = _txn_id(request)  # a malformed id is a 400 whatever the topic
        return web.json_response(self._in_buffer(str(self._topic(request).name), txn))

    def _pending(self, request: web.Request) -> Any:
        topic = self._topic(request)
        subscription = topic.subscriptions.get(request.match_info["subscription"])
        if subscription is None:
            raise fail(404, "Subscription not found")
        return subscription.pending_acks

    async def pending_ack_stats(self, request: web.Request) -> web.Response:
        """Pulsar's TransactionPendingAckStats: the transactions holding acknowledgements here."""
        pending = self._pending(request)
        return web.json_response({"state": "Ready", "ongoingTxnSize": 0 if pending is None else pending.txn_count,
                                  "lowWaterMarks": {} if "lowWaterMarks" in request.query else None})

    async def in_pending_ack_stats(self, request: web.Request) -> web.Response:
        txn = _txn_id(request)
        pending = self._pending(request)
        held = [] if pending is None else pending.held_by(txn)
        return web.json_response({"lowWaterMark": None, "ackedPositions": [_position(p) for p in held]})


def _txn_id(request: web.Request) -> Any:
    from magnetar.wire.txn import TxnId  # noqa: PLC0415 (transactions' wire module, with the first request)

    return TxnId(_integer(request.match_info["most"], "mostSigBits"),
                 _integer(request.match_info["least"], "leastSigBits"))


def _integer(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise fail(400, f"{what} must be an integer, not {text!r}") from None
    if not 0 <= value < 1 << 64:
        raise fail(400, f"{what} must be an unsigned 64-bit integer, not {text}")
    return value


def _position(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


def _ms(seconds: float) -> int:
    return int(seconds * 1000)

