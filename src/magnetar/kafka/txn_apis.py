"""The transactional APIs: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, DescribeTransactions and ListTransactions.

Built the first time the listener needs them, and only with `transactionCoordinatorEnabled`
(see transactions for what they do). Producer-level refusals (a fenced epoch, an unknown id)
answer every partition of a request alike, as Kafka's coordinator does.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.broker.service.protocol_handlers import HandlerBroker
from magnetar.broker.transactions.coordinator import MAX_NAMES_PER_COMMAND, TransactionCoordinator
from magnetar.kafka.access import CONSUME, PRODUCE, Access
from magnetar.kafka.errors import ANSWERABLE, TxnRefused, kafka_error
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request
from magnetar.kafka.transactions import STATES, KafkaTransactions, KafkaTxn

_NO_WAIT = datetime.timedelta(0)
INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 25, 26, 28
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
#: Transactional ids ListTransactions looks at in one turn of the event loop.
LIST_CHUNK = 500
#: api key -> (lowest, highest) version implemented (AddPartitionsToTxn v4 is brokers' batched form).
VERSIONS = {ADD_PARTITIONS: (0, 3), ADD_OFFSETS: (0, 3), END_TXN: (0, 3), TXN_OFFSET_COMMIT: (0, 3),
            DESCRIBE_TRANSACTIONS: (0, 0), LIST_TRANSACTIONS: (0, 1)}
#: The first version of each API whose clients know PRODUCER_FENCED (KIP-588).
_FENCED_FROM = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS: 2, ADD_OFFSETS: 2, END_TXN: 2, TXN_OFFSET_COMMIT: 2}


def _fenced_known(request: Request) -> bool:
    return request.api_version >= _FENCED_FROM[request.api_key]


def _bounded(count: int, what: str) -> None:
    """A request naming more than MAX_NAMES_PER_COMMAND partitions is refused before any is
    looked up (each would load a topic)."""
    if count > MAX_NAMES_PER_COMMAND:
        raise TxnRefused(ErrorCode.invalid_request, f"a request names at most {MAX_NAMES_PER_COMMAND} {what}")


def _since(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


class TxnApis:
    def __init__(self, broker: HandlerBroker, coordinator: TransactionCoordinator,
                 allocate_producer_id: Callable[[], int]) -> None:
        self.transactions = KafkaTransactions(broker, coordinator, allocate_producer_id)

    def _producer(self, request: Request, access: Access, transactional_id: str, producer_id: int,
                  epoch: int) -> KafkaTxn:
        access.transactional_ids()
        return self.transactions.producer(access.topics.namespace, transactional_id, producer_id, epoch,
                                          access.role, version_with_fenced=_fenced_known(request))

    async def init_producer_id(self, request: Request, access: Access) -> Any:
        module = response_module(INIT_PRODUCER_ID, request.api_version)
        body = request.body
        try:
            access.transactional_ids()
            producer_id, epoch = await self.transactions.init_producer(
                access.topics.namespace, body.transactional_id, int(body.transaction_timeout.total_seconds() * 1000),
                access.role, getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1),
                version_with_fenced=_fenced_known(request))
        except TxnRefused as exc:
            return build(module, "InitProducerIdResponse", throttle_time=_NO_WAIT, error_code=exc.code,
                         producer_id=-1, producer_epoch=-1)
        return build(module, "InitProducerIdResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none,
                     producer_id=producer_id, producer_epoch=epoch)

    async def add_partitions(self, request: Request, access: Access) -> Any:
        """Every partition is checked (it exists, the role may produce to it) before any is
        added; when one fails the others are OPERATION_NOT_ATTEMPTED, as in Kafka."""
        module = response_module(ADD_PARTITIONS, request.api_version)
        body = request.body
        wanted = [(topic.name, index) for topic in body.v3_and_below_topics for index in topic.partitions]
        errors: dict[tuple[str, int], ErrorCode] = {}
        names = []
        try:
            _bounded(len(wanted), "partitions")
            state = self._producer(request, access, body.v3_and_below_transactional_id,
                                   body.v3_and_below_producer_id, body.v3_and_below_producer_epoch)
        except TxnRefused as exc:
            errors = dict.fromkeys(wanted, exc.code)
        else:
            for topic, index in wanted:
                try:
                    access.topic(PRODUCE, topic)
                    names.append((topic, index, access.topics.log(topic, index).name))
                except ANSWERABLE as exc:
                    errors[(topic, index)] = kafka_error(exc)[0]
            if errors:
                errors = {key: errors.get(key, ErrorCode.operation_not_attempted) for key in wanted}
            else:
                try:
                    await self.transactions.add_partitions(state, names)
                except TxnRefused as exc:
                    errors = dict.fromkeys(wanted, exc.code)
        by_topic: dict[str, list[Any]] = {}
        for topic, index in wanted:
            by_topic.setdefault(topic, []).append(build(module, "AddPartitionsToTxnPartitionResult",
                                                        partition_index=index,
                                                        partition_error_code=errors.get((topic, index),
                                                                                        ErrorCode.none)))
        results = tuple(build(module, "AddPartitionsToTxnTopicResult", name=name, results_by_partition=tuple(parts))
                        for name, parts in by_topic.items())
        return build(module, "AddPartitionsToTxnResponse", throttle_time=_NO_WAIT,
                     results_by_topic_v3_and_below=results)

    async def add_offsets(self, request: Request, access: Access) -> Any:
        body = request.body
        try:
            access.group()
            state = self._producer(request, access, body.transactional_id, body.producer_id, body.producer_epoch)
            await self.transactions.add_group(state, body.group_id)
            error = ErrorCode.none
        except ANSWERABLE as exc:
            error = kafka_error(exc)[0]
        return build(response_module(ADD_OFFSETS, request.api_version), "AddOffsetsToTxnResponse",
                     throttle_time=_NO_WAIT, error_code=error)

    async def txn_offset_commit(self, request: Request, access: Access) -> Any:
        """The offsets are kept with the transaction: the group's (and its subscriptions') on commit."""
        module = response_module(TXN_OFFSET_COMMIT, request.api_version)
        body = request.body
        wanted = [(topic.name, p) for topic in body.topics for p in topic.partitions]
        errors: dict[tuple[str, int], ErrorCode] = {}
        try:
            _bounded(len(wanted), "offsets")
            access.group()
            state = self._producer(request, access, body.transactional_id, body.producer_id, body.producer_epoch)
        except ANSWERABLE as exc:
            errors = dict.fromkeys(((t, p.partition_index) for t, p in wanted), kafka_error(exc)[0])
        else:
            offsets = []
            for topic, p in wanted:
                try:
                    access.topic(CONSUME, topic)
                    access.topics.log(topic, p.partition_index)
                    offsets.append((topic, p.partition_index, p.committed_offset, p.committed_metadata))
                except ANSWERABLE as exc:
                    errors[(topic, p.partition_index)] = kafka_error(exc)[0]
            try:
                await self.transactions.add_offsets(state, body.group_id, offsets)
            except TxnRefused as exc:
                errors = dict.fromkeys(((t, p.partition_index) for t, p in wanted), exc.code)
        by_topic: dict[str, list[Any]] = {}
        for topic, p in wanted:
            by_topic.setdefault(topic, []).append(build(
                module, "TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
                error_code=errors.get((topic, p.partition_index), ErrorCode.none)))
        topics = tuple(build(module, "TxnOffsetCommitResponseTopic", name=name, partitions=tuple(parts))
                       for name, parts in by_topic.items())
        return build(module, "TxnOffsetCommitResponse", throttle_time=_NO_WAIT, topics=topics)

    async def end_txn(self, request: Request, access: Access) -> Any:
        body = request.body
        try:
            state = self._producer(request, access, body.transactional_id, body.producer_id, body.producer_epoch)
            await self.transactions.end(state, body.committed)
            error = ErrorCode.none
        except TxnRefused as exc:
            error = exc.code
        return build(response_module(END_TXN, request.api_version), "EndTxnResponse", throttle_time=_NO_WAIT,
                     error_code=error)

    def describe_transactions(self, request: Request, access: Access) -> Any:
        """The ids of the connection's namespace that its role uses; another role's, and any
        to a role without `produce` on the namespace, are TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        (whether they exist is not told)."""
        module = response_module(DESCRIBE_TRANSACTIONS, request.api_version)
        described = []
        allowed = access.namespace(PRODUCE)
        for transactional_id in request.body.transactional_ids:
            state = self.transactions.ids.get((access.topics.namespace, transactional_id))
            error = ErrorCode.none
            if not allowed or (state is not None and state.owner is not None and state.owner != access.role):
                error, state = ErrorCode.transactional_id_authorization_failed, None
            elif state is None:
                error = ErrorCode.transactional_id_not_found
            if state is None:
                described.append(build(module, "TransactionState", error_code=error, transactional_id=transactional_id,
                                       transaction_state="", transaction_timeout=_NO_WAIT,
                                       transaction_start_time=_since(0), producer_id=-1, producer_epoch=-1,
                                       topics=()))
                continue
            state = self.transactions.describe(state)
            by_topic: dict[str, list[int]] = {}
            for topic, index in state.partitions if state.txn is not None else ():
                by_topic.setdefault(topic, []).append(index)
            described.append(build(
                module, "TransactionState", error_code=error, transactional_id=transactional_id,
                transaction_state=state.status, transaction_timeout=datetime.timedelta(milliseconds=state.timeout_ms),
                transaction_start_time=_since(state.started),
                producer_id=state.producer_id, producer_epoch=state.epoch,
                topics=tuple(build(module, "TopicData", topic=topic, partitions=tuple(indexes))
                             for topic, indexes in by_topic.items())))
        return build(module, "DescribeTransactionsResponse", throttle_time=_NO_WAIT,
                     transaction_states=tuple(described))

    async def list_transactions(self, request: Request, access: Access) -> Any:
        """The namespace's ids its role uses (none without `produce` on it), filtered by state, producer id and (v1) by
        running longer than `duration_filter` ms. The broker keeps up to MAX_TRANSACTIONAL_IDS
        of them: they are looked at LIST_CHUNK at a time, other clients served in between."""
        module = response_module(LIST_TRANSACTIONS, request.api_version)
        body = request.body
        states = set(body.state_filters)
        producers = set(body.producer_id_filters)
        duration = getattr(body, "duration_filter", -1)
        namespace = access.topics.namespace
        now = datetime.datetime.now(tz=datetime.UTC).timestamp() * 1000
        listed = []
        ids = list(self.transactions.ids.items()) if access.namespace(PRODUCE) else []
        for seen, ((state_namespace, _), state) in enumerate(ids, 1):
            if not seen % LIST_CHUNK:
                await asyncio.sleep(0)
            if state_namespace != namespace or (state.owner is not None and state.owner != access.role):
                continue
            self.transactions.describe(state)
            if (states and state.status not in states) or (producers and state.producer_id not in producers):
                continue
            if duration >= 0 and (state.txn is None or now - state.started < duration):
                continue
            listed.append(build(module, "TransactionState", transactional_id=state.transactional_id,
                                producer_id=state.producer_id, transaction_state=state.status))
        return build(module, "ListTransactionsResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none,
                     unknown_state_filters=tuple(sorted(states - set(STATES))), transaction_states=tuple(listed))

    def handlers(self) -> dict[int, Callable[[Request, Access], Any]]:
        return {ADD_PARTITIONS: self.add_partitions, ADD_OFFSETS: self.add_offsets, END_TXN: self.end_txn,
                TXN_OFFSET_COMMIT: self.txn_offset_commit, DESCRIBE_TRANSACTIONS: self.describe_transactions,
                LIST_TRANSACTIONS: self.list_transactions}
