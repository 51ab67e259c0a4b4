"""Produce: record batches checked, stored once durable, each request answered in its turn.

The Produce requests a connection has read are taken as one group (produce_many): each
partition is checked against its policies once, and its accepted batches across the group
are stored with one append (per transaction), so they share one write, one wait and, in
the Pulsar entry format, often one entry (produce_entries). Each request is still answered
on its own, each partition with its own error or base offset: a partition refused in one
request fails only that answer. Offsets are the PIP-70 indexes the broker stamps. acks=0
gets no response (Kafka's rule), acks=1 and acks=all the same one: a single broker's durable
write is all of both.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.service.protocol_handlers import PartitionLog
from magnetar.formats.kafka_records import all_steps
from magnetar.kafka import publish_policies
from magnetar.kafka.access import PRODUCE, Access
from magnetar.kafka.errors import ANSWERABLE, Answer, MessageTooLarge, TxnRefused, kafka_error
from magnetar.kafka.idempotence import ACCEPT, ProducerStates
from magnetar.kafka.produce_entries import Pending, Prepared, ProducedEntries, PulsarRecords
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request
from magnetar.kafka.protocol.records import InvalidRecords, ProducedBatch
from magnetar.kafka.protocol.templates import Int64Templates
from magnetar.kafka.topics import KafkaTopics
from magnetar.storage import StorageFullError
from magnetar.wire.txn import TxnId

if TYPE_CHECKING:
    from magnetar.kafka.transactions import KafkaTransactions

log = logging.getLogger(__name__)
_NO_WAIT = datetime.timedelta(0)
PRODUCE_KEY = 0
_Result = tuple[ErrorCode, int, str | None]
_UNANSWERED: _Result = (ErrorCode.unknown_server_error, -1, None)
#: RecordBatch attributes: the batch is part of a transaction (Kafka's isTransactional).
_TRANSACTIONAL = 0x10


class _Waiting:
    """A request (acks 1 or all) whose answer waits for its partitions: built once every one
    is stored or refused and the whole group it came in is taken (the extra count)."""

    __slots__ = ("_answer", "parts", "received", "remaining", "request", "response", "throttle")

    def __init__(self, request: Request, parts: int, answer: Callable[[_Waiting], Any], received: float,
                 response: asyncio.Future[Any]) -> None:
        self.request = request
        self.parts: list[_Part] = []
        self.remaining = parts + 1
        self.throttle = 0.0
        self.received = received
        self.response = response
        self._answer = answer

    def release(self) -> None:
        self.remaining -= 1
        if self.remaining:
            return
        try:
            self.response.set_result(self._answer(self))
        except Exception as exc:  # the connection logs it and closes, rather than wait forever
            self.response.set_exception(exc)
        finally:
            # each part names its owner: left as they were, the two kept each other, and the
            # request with its records, alive until a young collection, and at 10,000 requests
            # a second those collections stalled the loop for tens of milliseconds
            self.parts.clear()


class _Part:
    """One partition's records in one request, and what it is answered."""

    __slots__ = ("index", "owner", "result", "topic")

    def __init__(self, topic: str, index: int, owner: _Waiting | None) -> None:
        self.topic = topic
        self.index = index
        self.owner = owner  # None with acks=0: nobody is answered
        self.result: _Result = _UNANSWERED

    def settle(self, result: _Result) -> None:
        self.result = result
        if self.owner is not None:
            self.owner.release()


class _Run:
    """The accepted batches of one partition (one transaction, or none) across a group's
    requests, in request order: stored with one append, so they share one write and one wait."""

    __slots__ = ("counts", "entries", "limit", "log", "parts", "size", "txn")

    def __init__(self, log: PartitionLog, txn: TxnId | None, limit: int) -> None:
        self.log = log
        self.txn = txn
        self.limit = limit  # the partition's largest entry
        self.parts: list[tuple[_Part, list[ProducedBatch]]] = []
        self.entries: list[Pending] = []
        self.counts: list[int] = []
        self.size = 0  # bytes of the batches

    def add(self, part: _Part, fresh: list[ProducedBatch], pending: list[Pending]) -> None:
        self.parts.append((part, fresh))
        for item, batch in zip(pending, fresh, strict=True):
            self.size += len(batch.data)
            last = self.entries[-1] if self.entries else None
            if isinstance(item, PulsarRecords) and isinstance(last, PulsarRecords) and last.join(item, self.limit):
                self.counts[-1] += batch.count
            else:
                self.entries.append(item)
                self.counts.append(batch.count)

    def batches(self) -> list[ProducedBatch]:
        return [batch for _, fresh in self.parts for batch in fresh]


class ProduceApi:
    def __init__(self, topics: KafkaTopics, config: ServiceConfiguration, no_response: object) -> None:
        self._topics = topics
        self._config = config
        self._no_response = no_response
        self._entries = ProducedEntries(config.entryFormat == "kafka")
        self.states = ProducerStates(config.brokerDeduplicationEntriesInterval)
        self._templates = Int64Templates(PRODUCE_KEY)
        self._converting: deque[tuple[Generator[None, None, list[Prepared | None]],
                                      Callable[[list[Prepared | None]], None], list[_Waiting | None],
                                      asyncio.Future[None]]] = deque()
        """Groups whose records are being converted, a step each in turn (produce_group)."""
        self.transactions: KafkaTransactions | None = None
        """The listener's transactional ids, once its transactional APIs are built."""

    @property
    def converting(self) -> int:
        """Produce groups whose records are being converted over several loop turns now."""
        return len(self._converting)

    def produce(self, request: Request, access: Access) -> Any:
        return self.produce_many([request], access)[0]

    def produce_many(self, requests: Sequence[Request], access: Access) -> list[Any]:
        return self.produce_group(requests, access)[0]

    def produce_group(self, requests: Sequence[Request], access: Access,
                      ) -> tuple[list[Any], asyncio.Future[None] | None]:
        """Each request's response, as a future settled by the partitions' store callbacks (no
        task per request), or NO_RESPONSE (acks=0); and, while the group is still being
        converted, a future done once it is taken (checked and handed to storage), before
        which its connection must take no other request, or None when it is taken already.

        Requests taken together (a connection's pipelined ones) are checked once per
        partition and stored with one append per partition; a partition refused in one of
        them fails only its own answer. Their records are split and converted first
        (_prepared), SLICE_RECORDS records a loop turn, with the other groups being converted
        in turn; then the group is taken in one turn, as a small one is in its first: every
        check, and the append of a partition's batches whole, sees the same state. The time
        to an answer joins pulsar_broker_publish_latency, a partition stored counting as a
        SEND does."""
        received = time.monotonic()
        loop = asyncio.get_running_loop()
        owners = [None if request.body.acks == 0 else
                  _Waiting(request, sum(len(topic.partition_data) for topic in request.body.topic_data),
                           self._answer, received, loop.create_future())
                  for request in requests]
        results = [self._no_response if owner is None else owner.response for owner in owners]
        checked: dict[tuple[str, int], tuple[PartitionLog, int] | Answer] = {}
        steps = self._prepared(requests, access, checked)
        try:
            next(steps)
        except StopIteration as done:  # taken in this turn: its partitions' checks still hold
            self._take_group(requests, owners, done.value, access, checked)
            return results, None
        taken = loop.create_future()
        self._converting.append((steps, lambda prepared: self._take_group(requests, owners, prepared, access, {}),
                                 owners, taken))
        if len(self._converting) == 1:
            loop.call_soon(self._convert)
        return results, taken

    def _convert(self) -> None:
        """One step of the group at the head of the queue (SLICE_RECORDS records), which then
        waits at the back: groups being converted share the loop's turns."""
        steps, take, owners, taken = self._converting.popleft()
        try:
            next(steps)
            self._converting.append((steps, take, owners, taken))
        except StopIteration as done:
            try:
                take(done.value)
                taken.set_result(None)
            except Exception as exc:
                _refused(owners, taken, exc)
        except Exception as exc:  # a fault of ours: the connection logs it and closes
            _refused(owners, taken, exc)
        if self._converting:
            asyncio.get_running_loop().call_soon(self._convert)

    def _prepared(self, requests: Sequence[Request], access: Access,
                  checked: dict[tuple[str, int], tuple[PartitionLog, int] | Answer],
                  ) -> Generator[None, None, list[Prepared | None]]:
        """Every partition's records of the group prepared (ProducedEntries.prepare), in the
        group's order; None for a partition its role may not produce to (refused when taken,
        so a refused client costs no conversion). Each partition's check goes into `checked`."""
        prepared: list[Prepared | None] = []
        taken = 0
        for request in requests:
            for topic in request.body.topic_data:
                for data in topic.partition_data:
                    key = (topic.name, data.index)
                    target = checked.get(key)
                    if target is None:
                        target = checked[key] = self._target(access, *key)
                    if isinstance(target[0], PartitionLog):
                        item, taken = yield from self._entries.prepare(data.records, taken, target[1])
                        prepared.append(item)
                    else:
                        prepared.append(None)
        return prepared

    def _take_group(self, requests: Sequence[Request], owners: list[_Waiting | None],
                    prepared: list[Prepared | None], access: Access,
                    checked: dict[tuple[str, int], tuple[PartitionLog, int] | Answer]) -> None:
        """Check and store a prepared group (produce_group), in one turn; `checked` holds the
        partitions checked in this turn already."""
        runs: dict[tuple[str, int], _Run] = {}
        in_order: list[_Run] = []
        now = int(time.time() * 1000)
        each = iter(prepared)
        for request, owner in zip(requests, owners, strict=True):
            body = request.body
            producer = f"kafka-{request.client_id or 'client'}"
            transactional_id = getattr(body, "transactional_id", None)
            for topic in body.topic_data:
                for data in topic.partition_data:
                    part = _Part(topic.name, data.index, owner)
                    records = next(each)
                    if owner is not None:
                        owner.parts.append(part)
                    key = (topic.name, data.index)
                    target = checked.get(key)
                    if target is None:
                        target = checked[key] = self._target(access, *key)
                    if not isinstance(target[0], PartitionLog):
                        part.settle((target[0], -1, target[1]))
                        continue
                    if records is None:  # refused while it was prepared, not now: prepared now
                        records = all_steps(self._entries.prepare(data.records, 0, target[1]))[0]
                    run = self._take(part, producer, records, target, access, transactional_id, now,
                                     runs.get(key))
                    if run is not None and runs.get(key) is not run:
                        runs[key] = run
                        in_order.append(run)
        for run in in_order:
            self._store(run, now)
        for owner in owners:
            if owner is not None:
                owner.release()

    def _target(self, access: Access, topic: str, index: int) -> tuple[PartitionLog, int] | Answer:
        """A partition the role may produce to and its policies let take records now, with the
        largest batch it takes; else the error its answers carry."""
        try:
            access.topic(PRODUCE, topic)
            log_ = access.topics.log(topic, index)
            refused = publish_policies.refusal(access.topics.broker, log_)
            return refused if refused is not None else (log_, publish_policies.max_batch_size(log_))
        except ANSWERABLE as exc:
            return kafka_error(exc)

    def _answer(self, waiting: _Waiting) -> Any:
        stored = sum(part.result[0] == ErrorCode.none for part in waiting.parts)
        self._topics.broker.publish_latency.observe((time.monotonic() - waiting.received) * 1000, stored)
        return self._response(waiting.request.api_version,
                              [(part.topic, part.index, *part.result) for part in waiting.parts], waiting.throttle)

    def _response(self, version: int, answers: list[tuple[str, int, ErrorCode, int, str | None]],
                  throttle: float) -> Any:
        """Every partition stored: the shape's encoded template with the base offsets in it
        (a throttled answer carries its wait in `throttle_time_ms`, which the templates do not)."""
        if throttle:
            return self._body(version, answers, datetime.timedelta(seconds=throttle))
        if all(error == ErrorCode.none and message is None for _, _, error, _, message in answers):
            offsets = [base_offset for *_, base_offset, _ in answers]
            shape = tuple((topic, index) for topic, index, *_ in answers)

            def stored_at(values: Sequence[int]) -> Any:
                return self._body(version, [(topic, index, ErrorCode.none, value, None)
                                            for (topic, index), value in zip(shape, values, strict=True)])

            filled = self._templates.fill(version, shape, offsets, stored_at)
            if filled is not None:
                return filled
        return self._body(version, answers)

    @staticmethod
    def _body(version: int, answers: list[tuple[str, int, ErrorCode, int, str | None]],
              throttle: datetime.timedelta = _NO_WAIT) -> Any:
        module = response_module(0, version)
        by_topic: dict[str, list[Any]] = {}
        for topic, index, error, base_offset, message in answers:
            by_topic.setdefault(topic, []).append(build(
                module, "PartitionProduceResponse", index=index, error_code=error, base_offset=base_offset,
                log_append_time=None, log_start_offset=-1, record_errors=(), error_message=message))
        responses = tuple(build(module, "TopicProduceResponse", name=name, partition_responses=tuple(parts))
                          for name, parts in by_topic.items())
        return build(module, "ProduceResponse", responses=responses, throttle_time=throttle)

    def _take(self, part: _Part, producer: str, records: Prepared, target: tuple[PartitionLog, int],
              access: Access, transactional_id: str | None, now: int, run: _Run | None) -> _Run | None:
        """Check one partition's batches and convert the accepted ones, joining them to `run`
        (the partition's so far in this group) or a new run when their transaction differs;
        the run they joined, or None when `part` is answered already (refused, or duplicates).
        Transactional batches go through the partition's transaction buffer."""
        log_, limit = target
        try:
            batches = self._checked(records, limit)
            txn = self._transaction(batches, transactional_id, part.topic, part.index, access) \
                if batches[0].header.attributes & _TRANSACTIONAL or len(batches) > 1 else None
        except ANSWERABLE as exc:
            part.settle(_failed(kafka_error(exc)))
            return None
        verdicts = [self.states.check(log_, batch) for batch in batches]
        refused = next((v.error for v in verdicts if v.error != ErrorCode.none), None)
        fresh = [batch for batch, verdict in zip(batches, verdicts, strict=True) if verdict is ACCEPT]
        converted = [item for item, verdict in zip(records.conversions(), verdicts, strict=True) if verdict is ACCEPT]
        if refused is not None or not fresh:
            self.states.forget(log_, fresh)  # accepted beside a refused one: the request stores nothing
            duplicate = verdicts[0].duplicate_of
            part.settle((refused or ErrorCode.none, -1 if duplicate is None else duplicate, None))
            return None
        try:
            pending = [self._entries.pending(producer, batch, now, txn, item)
                       for batch, item in zip(fresh, converted, strict=True)]
        except ANSWERABLE as exc:
            self.states.forget(log_, fresh)
            part.settle(_failed(kafka_error(exc)))
            return None
        if run is None or run.txn != txn:
            run = _Run(log_, txn, limit)
        run.add(part, fresh, pending)
        return run

    def _store(self, run: _Run, now: int) -> None:
        """One append of a run; what the topic's publish rate makes its producers wait goes into
        their answers."""
        log_ = run.log
        first = run.parts[0][0]

        def stored(base_offset: int | None, exc: BaseException | None) -> None:
            if exc is not None or base_offset is None:
                if not isinstance(exc, StorageFullError):  # a full disk is logged once, by the broker
                    log.warning("Kafka produce to %s-%d failed: %s", first.topic, first.index, exc)
                self._failed_run(run, (ErrorCode.kafka_storage_error, str(exc)))  # the write itself failed
                return
            offset = base_offset
            for part, fresh in run.parts:
                start = offset
                for batch in fresh:
                    self.states.stored(log_, batch, offset)
                    offset += batch.count
                part.settle((ErrorCode.none, start, None))

        try:
            log_.append([self._entries.entry(item, now) for item in run.entries], run.counts, stored, run.txn)
            wait = log_.publish_wait(sum(run.counts), run.size)
        except ANSWERABLE as exc:  # a ledger that failed a write or closed is KAFKA_STORAGE_ERROR
            self._failed_run(run, kafka_error(exc))
            return
        if wait:
            for part, _ in run.parts:
                if part.owner is not None:
                    part.owner.throttle = max(part.owner.throttle, wait)

    def _failed_run(self, run: _Run, answer: Answer) -> None:
        self.states.forget(run.log, run.batches())
        for part, _ in run.parts:
            part.settle(_failed(answer))

    @staticmethod
    def _checked(records: Prepared, limit: int) -> list[ProducedBatch]:
        batches = records.batches
        if isinstance(batches, InvalidRecords):
            raise batches
        for batch in batches:
            if len(batch.data) > limit:
                raise MessageTooLarge(f"a record batch of {len(batch.data)} bytes is over maxMessageSize={limit}")
        return batches

    def _transaction(self, batches: list[ProducedBatch], transactional_id: str | None, topic: str, partition: int,
                     access: Access) -> TxnId | None:
        """The transaction transactional batches belong to: their producer's, open, with this
        partition added (TxnRefused else); None for batches outside any. A request's batches
        for one partition are all in it or all outside."""
        flags = {bool(batch.header.attributes & _TRANSACTIONAL) for batch in batches}
        if len(flags) > 1:
            raise InvalidRecords("transactional and non-transactional batches in one partition's records",
                                 corrupt=False)
        if not flags.pop():
            return None
        header = batches[0].header
        if self.transactions is None or transactional_id is None:
            raise TxnRefused(ErrorCode.invalid_txn_state if self.transactions is not None else
                             ErrorCode.transactional_id_authorization_failed,
                             "transactional records need a transactional id (and transactionCoordinatorEnabled)")
        try:
            state = self.transactions.producer(access.topics.namespace, transactional_id, header.producer_id,
                                               header.producer_epoch, access.role, version_with_fenced=False)
        except TxnRefused as exc:
            if exc.code == ErrorCode.coordinator_load_in_progress:  # not a produce error: one every client retries
                raise TxnRefused(ErrorCode.not_enough_replicas, str(exc)) from None
            raise
        if not self.transactions.has_partition(state, topic, partition):
            raise TxnRefused(ErrorCode.invalid_txn_state, f"{topic}-{partition} was not added to the transaction")
        return state.txn


def _failed(answer: Answer) -> _Result:
    return answer[0], -1, answer[1]


def _refused(owners: list[_Waiting | None], taken: asyncio.Future[None], exc: Exception) -> None:
    """A group that failed past its partitions' own errors: every answer fails with `exc`."""
    for owner in owners:
        if owner is not None and not owner.response.done():
            owner.response.set_exception(exc)
    taken.set_exception(exc)

