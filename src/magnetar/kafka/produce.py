"""Produce: record batches checked, stored as one group per partition, answered once durable.

With entryFormat=kafka a batch is stored as the client sent it (PIP-96's Kafka format, one
batch an entry); with entryFormat=pulsar it becomes a Pulsar batch every Pulsar client
reads. Either way the offsets are the PIP-70 indexes the broker stamps, so the response's
base offset is the first index of the partition's group. acks=0 gets no response (Kafka's
rule), acks=1 and acks=all the same one: a single broker's durable write is all of both.
Entries carry no Pulsar checksum (KoP writes none either): the batch's own CRC-32C was
checked on arrival, and storage keeps a CRC of every entry it writes.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from magnetar.broker.config import ServiceConfiguration
from magnetar.formats.kafka_records import kafka_entry_properties
from magnetar.kafka import publish_policies
from magnetar.kafka.access import PRODUCE, Access
from magnetar.kafka.errors import ANSWERABLE, Answer, MessageTooLarge, TxnRefused, kafka_error
from magnetar.kafka.idempotence import ACCEPT, ProducerStates
from magnetar.kafka.producer_snapshots import producer_name
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request
from magnetar.kafka.protocol.records import InvalidRecords, ProducedBatch, split_batches, to_pulsar_batch
from magnetar.kafka.protocol.templates import Int64Templates
from magnetar.kafka.topics import KafkaTopics
from magnetar.storage import StorageFullError
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import TxnId

if TYPE_CHECKING:
    from magnetar.kafka.transactions import KafkaTransactions

log = logging.getLogger(__name__)
_NO_WAIT = datetime.timedelta(0)
PRODUCE_KEY = 0
_Result = tuple[ErrorCode, int, str | None]
#: RecordBatch attributes: the batch is part of a transaction (Kafka's isTransactional).
_TRANSACTIONAL = 0x10


class ProduceApi:
    def __init__(self, topics: KafkaTopics, config: ServiceConfiguration, no_response: object) -> None:
        self._topics = topics
        self._config = config
        self._no_response = no_response
        self._kafka_format = config.entryFormat == "kafka"
        self._sequence = 0
        self.states = ProducerStates(config.brokerDeduplicationEntriesInterval)
        self._templates = Int64Templates(PRODUCE_KEY)
        self.transactions: KafkaTransactions | None = None
        """The listener's transactional ids, once its transactional APIs are built."""

    def produce(self, request: Request, access: Access) -> Any:
        """The response as a future settled by the partitions' store callbacks (no task per
        request). The time to it joins pulsar_broker_publish_latency, a partition stored
        counting as a SEND does."""
        received = time.monotonic()
        body = request.body
        producer = f"kafka-{request.client_id or 'client'}"
        waits = [0.0]
        transactional_id = getattr(body, "transactional_id", None)
        results = [(topic.name, part.index,
                    self._append(producer, topic.name, part.index, part.records, access, waits, transactional_id))
                   for topic in body.topic_data for part in topic.partition_data]
        throttle = max(waits)
        if body.acks == 0:
            return self._no_response
        response: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiting = [pending for *_, pending in results if not pending.done()]
        remaining = len(waiting)

        def answer() -> None:
            try:
                stored = sum(pending.result()[0] == ErrorCode.none for *_, pending in results)
                self._topics.broker.publish_latency.observe((time.monotonic() - received) * 1000, stored)
                response.set_result(self._response(request.api_version, results, throttle))
            except Exception as exc:  # the connection logs it and closes, rather than wait forever
                response.set_exception(exc)

        def settled(_stored: asyncio.Future[_Result]) -> None:
            nonlocal remaining
            remaining -= 1
            if not remaining:
                answer()

        if not waiting:
            answer()
        for pending in waiting:
            pending.add_done_callback(settled)
        return response

    def _response(self, version: int, results: list[tuple[str, int, asyncio.Future[_Result]]],
                  throttle: float) -> Any:
        """Every partition stored: the shape's encoded template with the base offsets in it
        (a throttled answer carries its wait in `throttle_time_ms`, which the templates do not)."""
        answers = [(topic, index, *pending.result()) for topic, index, pending in results]
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

    def _append(self, producer: str, topic: str, partition: int, records: bytes | None,
                access: Access, waits: list[float], transactional_id: str | None = None) -> asyncio.Future[_Result]:
        """Store one partition's batches; what the topic's publish rate makes its producer
        wait goes into `waits`. Transactional batches go through the partition's transaction buffer."""
        done: asyncio.Future[_Result] = asyncio.get_running_loop().create_future()
        try:
            access.topic(PRODUCE, topic)
            log_ = access.topics.log(topic, partition)
            refused = publish_policies.refusal(access.topics.broker, log_)
            if refused is not None:
                done.set_result((refused[0], -1, refused[1]))
                return done
            batches = self._checked(records, publish_policies.max_batch_size(log_))
            txn, recording = self._transaction(batches, transactional_id, topic, partition, access) \
                if batches[0].header.attributes & _TRANSACTIONAL or len(batches) > 1 else (None, None)
        except ANSWERABLE as exc:
            return _failed(done, kafka_error(exc))
        verdicts = [self.states.check(log_, batch) for batch in batches]
        refused = next((v.error for v in verdicts if v.error != ErrorCode.none), None)
        fresh = [batch for batch, verdict in zip(batches, verdicts, strict=True) if verdict is ACCEPT]
        if refused is not None or not fresh:
            self.states.forget(log_, fresh)  # accepted beside a refused one: the request stores nothing
            duplicate = verdicts[0].duplicate_of
            done.set_result((refused or ErrorCode.none, -1 if duplicate is None else duplicate, None))
            return done

        def stored(base_offset: int | None, exc: BaseException | None) -> None:
            if exc is not None or base_offset is None:
                if not isinstance(exc, StorageFullError):  # a full disk is logged once, by the broker
                    log.warning("Kafka produce to %s-%d failed: %s", topic, partition, exc)
                self.states.forget(log_, fresh)
                _failed(done, (ErrorCode.kafka_storage_error, str(exc)))  # the write itself failed
                return
            offset = base_offset
            for batch in fresh:
                self.states.stored(log_, batch, offset)
                offset += batch.count
            done.set_result((ErrorCode.none, base_offset, None))

        try:
            now = int(time.time() * 1000)
            log_.append([self._entry(producer, batch, now, txn) for batch in fresh], [b.count for b in fresh], stored,
                        txn)
            waits.append(log_.publish_wait(sum(b.count for b in fresh), sum(len(b.data) for b in fresh)))
        except ANSWERABLE as exc:  # a ledger that failed a write or closed is KAFKA_STORAGE_ERROR
            self.states.forget(log_, fresh)
            _failed(done, kafka_error(exc))
        return done if recording is None else _once_recorded(recording, done)

    @staticmethod
    def _checked(records: bytes | None, limit: int) -> list[ProducedBatch]:
        if not records:
            raise InvalidRecords("no records", corrupt=False)
        batches = split_batches(records)
        for batch in batches:
            if len(batch.data) > limit:
                raise MessageTooLarge(f"a record batch of {len(batch.data)} bytes is over maxMessageSize={limit}")
        return batches

    def _transaction(self, batches: list[ProducedBatch], transactional_id: str | None, topic: str, partition: int,
                     access: Access) -> tuple[TxnId | None, asyncio.Future[None] | None]:
        """The transaction transactional batches belong to: their producer's, open, with this
        partition added (TxnRefused else), and the write of the partition's records if it is
        still under way; None for batches outside any. A request's batches for one partition
        are all in it or all outside."""
        flags = {bool(batch.header.attributes & _TRANSACTIONAL) for batch in batches}
        if len(flags) > 1:
            raise InvalidRecords("transactional and non-transactional batches in one partition's records",
                                 corrupt=False)
        if not flags.pop():
            return None, None
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
        return state.txn, state.recording.get((topic, partition))

    def _entry(self, producer: str, batch: ProducedBatch, now: int, txn: TxnId | None = None) -> bytes:
        header = batch.header
        if header.producer_id >= 0:  # what recovery reads back (producer_snapshots)
            producer, sequence = producer_name(header.producer_id, header.producer_epoch), header.base_sequence
        else:
            sequence = self._sequence
            self._sequence += batch.count
        metadata = pb.MessageMetadata(producer_name=producer, sequence_id=sequence,
                                      publish_time=now, num_messages_in_batch=batch.count)
        if txn is not None:  # what the transaction buffer and every reader decide by
            metadata.txnid_most_bits, metadata.txnid_least_bits = txn
        if self._kafka_format:
            for key, value in kafka_entry_properties().items():
                metadata.properties.add(key=key, value=value)
            return build_entry(metadata, batch.data, checksum=False)
        if header.max_timestamp > 0:  # what ListOffsets by time searches on (offsets_by_time)
            metadata.event_time = header.max_timestamp
        converted = to_pulsar_batch(batch)
        if converted.compression != pb.NONE:
            metadata.compression = converted.compression  # type: ignore[assignment]
            metadata.uncompressed_size = converted.uncompressed_size
        return build_entry(metadata, converted.payload, checksum=False)


def _once_recorded(recording: asyncio.Future[None], stored: asyncio.Future[_Result]) -> asyncio.Future[_Result]:
    """The answer once the batches are stored and the transaction's record of the partition
    is durable too: KAFKA_STORAGE_ERROR if that record could not be written."""
    async def both() -> _Result:
        result = await stored
        try:
            await asyncio.shield(recording)
        except Exception as exc:  # the transaction can only abort (see KafkaTransactions._recorded)
            return ErrorCode.kafka_storage_error, -1, f"the transaction could not record the partition: {exc}"
        return result

    return asyncio.ensure_future(both())


def _failed(done: asyncio.Future[_Result], answer: Answer) -> asyncio.Future[_Result]:
    done.set_result((answer[0], -1, answer[1]))
    return done
