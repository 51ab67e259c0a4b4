"""Issue 47, a Kafka transaction's crash edges: the broker dies between a transaction's
decision and its markers.

The dead broker is a snapshot of an in-process broker's data dir taken while the markers are
held on their way to the disk (`held_writes`): the decision and the id's record say the
transaction ended, its partition has its records and no marker. The restart is an in-process
broker on that snapshot (its steps run by the test, so that one can fail as a disk does),
and what it left is read by a real `magnetar standalone` with real read_committed clients.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import errno
import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from committed_readers import confluent, kafka_python
from confluent_kafka import Producer as ConfluentProducer
from kafka.record.default_records import DefaultRecordBatch
from kafka_brokers import KafkaStandalone, RawKafka, batch, produce_request
from kafka_in_process import fetch_request, held_writes, run_in_process
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.end_txn.v3 import request as end_txn
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.list_offsets.v7 import request as list_offsets

from magnetar.storage import SqliteMetadataStore

TOPIC, TRANSACTIONAL_ID = "t", "tx"
PARTITION = f"persistent://public/default/{TOPIC}-partition-0"
ID_RECORD = f"/protocol-handlers/state/kafka/transactions/public%2Fdefault/{TRANSACTIONAL_ID}"
FORMATS = ["pulsar", "kafka"]


class Producer:
    """A transactional producer speaking raw requests to an in-process broker (the same one
    before and after the restart: its id, epoch and next sequence)."""

    def __init__(self, kafka, ids: tuple[int, int]) -> None:
        self.kafka, self.ids, self.sequence = kafka, ids, 0

    @classmethod
    async def start(cls, kafka, timeout: float = 60) -> Producer:
        if TOPIC not in kafka.apis.topics.names():
            kafka.apis.topics.create(TOPIC, 1)
        answer = await kafka.call(22, 4, init_producer_id.InitProducerIdRequest(
            transactional_id=TRANSACTIONAL_ID, transaction_timeout=datetime.timedelta(seconds=timeout),
            producer_id=-1, producer_epoch=-1))
        assert answer.error_code == ErrorCode.none
        return cls(kafka, (answer.producer_id, answer.producer_epoch))

    async def add_partition(self) -> ErrorCode:
        answer = await self.kafka.call(24, 3, add_partitions.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TRANSACTIONAL_ID, v3_and_below_producer_id=self.ids[0],
            v3_and_below_producer_epoch=self.ids[1],
            v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)))
        return answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    async def produce(self, values: list[bytes]) -> ErrorCode:
        request = dataclasses.replace(produce_request(TOPIC, batch(values, (*self.ids, self.sequence),
                                                                   transactional=True)),
                                      transactional_id=TRANSACTIONAL_ID)
        error = (await self.kafka.call(0, 9, request)).responses[0].partition_responses[0].error_code
        if error == ErrorCode.none:
            self.sequence += len(values)
        return error

    async def end(self, commit: bool) -> ErrorCode:
        return (await self.kafka.call(26, 3, end_txn.EndTxnRequest(
            transactional_id=TRANSACTIONAL_ID, producer_id=self.ids[0], producer_epoch=self.ids[1],
            committed=commit))).error_code


async def retried(call, retriable: set[ErrorCode], timeout: float = 20.0) -> ErrorCode:
    """`call`'s answer once it is not one a client retries (after its back-off), or the last."""
    deadline = time.monotonic() + timeout
    while (error := await call()) in retriable and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return error


def crash_snapshot(data_dir: Path, into: Path, config: dict[str, object], *, commit: bool) -> tuple[int, int]:
    """`into`: `data_dir` as a SIGKILL leaves it once the producer's first transaction (old1,
    old2) was decided (`commit`) and its end recorded in the id's record, with its marker not
    written. The producer's (id, epoch)."""
    ids = []

    async def test(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        producer = await Producer.start(kafka)
        ids.append(producer.ids)
        assert await producer.add_partition() == ErrorCode.none
        assert await producer.produce([b"old1", b"old2"]) == ErrorCode.none
        with held_writes(kafka.service):
            assert await producer.end(commit) == ErrorCode.none  # answered: the decision is durable
            ended = "CompleteCommit" if commit else "CompleteAbort"
            await _record_says(data_dir, ended)
            assert kafka.apis.topics.log(TOPIC, 0).end_offset() == 0  # the marker is held
            shutil.copytree(data_dir, into, ignore=shutil.ignore_patterns("metadata.db*"))
            with sqlite3.connect(data_dir / "metadata.db") as source, sqlite3.connect(into / "metadata.db") as copy:
                source.backup(copy)

    run_in_process(data_dir, test, **config)
    return ids[0]


async def _last_stable(kafka) -> int:
    """Partition 0's latest offset for read_committed readers (ListOffsets: the last stable offset)."""
    request = list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=(
        list_offsets.ListOffsetsTopic(name=TOPIC, partitions=(
            list_offsets.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    return (await kafka.call(2, 7, request)).topics[0].partitions[0].offset


async def _record_says(data_dir: Path, status: str, timeout: float = 10.0) -> None:
    """Until the id's record on disk has `status` (its write is not waited for)."""
    deadline = time.monotonic() + timeout
    while True:
        store = SqliteMetadataStore(data_dir / "metadata.db", read_only=True)
        try:
            if f'"status": "{status}"'.encode() in (store.get(ID_RECORD) or b""):
                return
        finally:
            store.close()
        assert time.monotonic() < deadline, f"the id's record never said {status}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("entry_format", FORMATS)
@pytest.mark.parametrize("commit", [False, True], ids=["abort", "commit"])
def test_after_a_restart_the_next_transaction_waits_for_the_last_ones_markers(tmp_path, entry_format, commit):
    """Issue 47 item 1: the restart's marker of the decided transaction fails (its partition's
    write fails, as an I/O error does, and the partition pauses); the producer starts its next
    transaction at once. It is held (CONCURRENT_TRANSACTIONS, retried) until that marker is
    written, so its records follow it. Had they preceded it, the marker, written by a later
    restart, would stand after them: read_committed readers drop the next transaction's
    records behind an abort's marker, and wait at its records for the commit's."""
    config = {"transactionCoordinatorEnabled": True, "entryFormat": entry_format}
    snapshot = tmp_path / "crashed"
    ids = crash_snapshot(tmp_path / "data", snapshot, config, commit=commit)

    async def restarted(kafka) -> None:
        kafka.service.failed_writes.write_failed(PARTITION, OSError(errno.EIO, "injected"))
        kafka.service.transactions.recover()  # the marker's write is refused: the partition pauses
        await kafka.apis.transactional().transactions.recover()
        producer = Producer(kafka, ids)
        producer.sequence = 2
        waiting = {ErrorCode.concurrent_transactions, ErrorCode.kafka_storage_error}  # the partition pauses
        assert await retried(producer.add_partition, waiting) == ErrorCode.none
        assert await retried(lambda: producer.produce([b"new1", b"new2"]),
                             {ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error}) == ErrorCode.none
        assert await producer.end(commit=True) == ErrorCode.none
        deadline = time.monotonic() + 10
        while (stable := await _last_stable(kafka)) < 6 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # the commit's marker is on its way
        assert stable == 6  # old1, old2, their marker, new1, new2, theirs: readers are not held back

    run_in_process(snapshot, restarted, **config)
    broker = KafkaStandalone(snapshot, ["transactionCoordinatorEnabled=true", f"entryFormat={entry_format}"],
                             args=["--kafka", "0"]).start()
    try:
        expected = [b"old1", b"old2", b"new1", b"new2"] if commit else [b"new1", b"new2"]
        assert confluent(broker.bootstrap, TOPIC, len(expected)) == expected
        assert kafka_python(broker.bootstrap, TOPIC, len(expected)) == expected
    finally:
        broker.stop()


def test_a_transaction_aborted_at_its_timeout_holds_the_next_producer_until_its_markers(tmp_path) -> None:
    """Issue 47 item 1, without a restart: the coordinator aborts a transaction at its timeout,
    its marker held on the way to the disk; the old producer, back, is fenced; a new producer
    with the id is answered once that marker is durable, as after EndTxn."""
    async def test(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        old = await Producer.start(kafka, timeout=1)
        assert await old.add_partition() == ErrorCode.none
        assert await old.produce([b"late"]) == ErrorCode.none
        coordinator = kafka.service.transactions
        (txn,) = [meta.txn for meta in coordinator.unfinished()]
        with held_writes(kafka.service) as release:
            while (meta := coordinator.metadata(txn)) is not None and meta.status == "OPEN":
                await asyncio.sleep(0.05)  # the timeout (a second) passes; the abort's marker is held
            assert await old.add_partition() == ErrorCode.producer_fenced
            new = asyncio.ensure_future(Producer.start(kafka))
            await asyncio.sleep(0.2)
            assert not new.done()  # waits for the abort's marker
            release.set()
            await new
        assert kafka.apis.topics.log(TOPIC, 0).end_offset() == 2  # the record and its marker

    run_in_process(tmp_path, test, transactionCoordinatorEnabled=True)


def _control_batches(broker: KafkaStandalone, topic: str) -> list[tuple[int, int, int]]:
    """(offset, producer id, epoch) of each control batch of partition 0 (raw Fetch, read_uncommitted)."""
    raw = RawKafka(broker.bootstrap)
    try:
        (answer,) = raw.call(1, 12, fetch_request(topic, {0: 0})).responses[0].partitions
    finally:
        raw.close()
    records, found = answer.records or b"", []
    while len(records) >= 12:
        size = int.from_bytes(records[8:12], "big") + 12
        one = DefaultRecordBatch(bytearray(records[:size]))
        if one.is_control_batch:
            found.append((one.base_offset, one.producer_id, one.producer_epoch))
        records = records[size:]
    return found


@pytest.mark.parametrize("entry_format", FORMATS)
def test_a_restart_soon_after_a_commit_writes_its_marker_once(tmp_path, entry_format) -> None:
    """Issue 47 item 2: the coordinator deletes an ended transaction's record with its log's
    next write; a SIGKILL before that leaves it, and the restart ends the transaction again.
    Its partition, which has the marker, gets no second one: a Kafka fetch sees one control
    batch."""
    broker = KafkaStandalone(tmp_path / "data", ["transactionCoordinatorEnabled=true", f"entryFormat={entry_format}"],
                             args=["--kafka", "0"]).start()
    try:
        producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": TRANSACTIONAL_ID})
        producer.init_transactions(20)
        producer.begin_transaction()
        producer.produce(TOPIC, b"a")
        producer.produce(TOPIC, b"b")
        producer.commit_transaction(20)
        del producer  # it would reconnect while the broker is down
        assert confluent(broker.bootstrap, TOPIC, 2) == [b"a", b"b"]  # the marker is durable
        (marker,) = _control_batches(broker, TOPIC)
        broker.kill()
        store = SqliteMetadataStore(broker.data_dir / "metadata.db")
        (key,) = [key for key in store.list("/transactions/coordinator/") if "/txn/" in key] or [
            "/transactions/coordinator/0/txn/00000000000000000001"]
        store.put(key, json.dumps({  # the coordinator's record as the SIGKILL may leave it
            "status": "COMMITTING", "deadline": time.time() + 60, "partitions": [PARTITION], "subscriptions": [],
            "owner": None, "opened": time.time(), "producer": f"kafka:{marker[1]}:{marker[2]}"}).encode())
        store.close()
        broker.start()
        assert confluent(broker.bootstrap, TOPIC, 2) == [b"a", b"b"]
        assert _control_batches(broker, TOPIC) == [marker]
    finally:
        broker.stop()
