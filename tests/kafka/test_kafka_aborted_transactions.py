"""Issue 47: Fetch's aborted-transactions list, and the markers Kafka fetchers read.

One partition gets, at random (seeded), transactions of two transactional producers that
overlap, records of a plain producer, and transactions of a Pulsar client, committed or
aborted; the broker is SIGKILLed once in the middle (transactions open) and once at the
end. The Pulsar client's transactions (magnetar.client: the official Python client has
none) cannot pass themselves off as a Kafka producer's: a Pulsar producer named as Kafka
produce names its entries (`kafka:<id>:<epoch>`) is refused (tests/broker/test_bad_input.py).

Checked on the raw Fetch answer: read_committed lists exactly the aborted Kafka
transactions with records in the range served (producer id from DescribeTransactions,
first offset from the producers' delivery reports), and none of the Pulsar client's; a
Kafka transaction's marker is a control batch with its producer id and type; fetches from
random offsets with small sizes list what Kafka's rule says. Then every client library's
read_committed consumer gets exactly the committed records. With entryFormat=kafka the
transaction buffer snapshots each transaction (the list comes back from snapshots); with
entryFormat=pulsar it never does (it comes back from reading the entries).
"""

from __future__ import annotations

import os
import random
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from committed_readers import READER_IDS, READERS
from confluent_kafka import KafkaException, Producer
from kafka.record.default_records import DefaultRecordBatch
from kafka_brokers import KafkaStandalone, RawKafka, start_kafka_broker
from kafka_in_process import fetch_request
from kio.schema.describe_transactions.v0 import request as describe_transactions

import magnetar.client

_ABORT, _COMMIT = 0, 1
_CONFIGS = {
    "kafka": ("transactionBufferSnapshotMaxTransactionCount=1",),
    "pulsar": ("transactionBufferSnapshotMaxTransactionCount=100000",
               "transactionBufferSnapshotMinTimeInMillis=3600000"),
}


@dataclass
class Txn:
    """One Kafka transaction: its producer, its records' values and offsets, how it ended."""

    producer: str
    values: list[bytes] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    commit: bool | None = None


@dataclass
class Written:
    topic: str
    pids: dict[str, int]
    txns: list[Txn]
    pulsar_committed: list[bytes]
    pulsar_aborted: list[bytes]
    plain: list[tuple[int, bytes]]


class _Transactional:
    """A confluent-kafka transactional producer and the transaction it has open."""

    def __init__(self, broker: KafkaStandalone, name: str, topic: str) -> None:
        self.name, self.topic = name, topic
        self.producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-{name}",
                                  "linger.ms": 5})
        self.producer.init_transactions(30)
        self.open: Txn | None = None

    def send(self, rng: random.Random, done: list[Txn]) -> None:
        """Begin a transaction, or add records to the open one, or end it (commit or abort)."""
        if self.open is not None and rng.random() < 0.6:
            self.end(rng.random() < 0.5, done)
            return
        if self.open is None:
            self.producer.begin_transaction()
            self.open = Txn(self.name)
        txn = self.open
        for _ in range(rng.randint(1, 3)):
            value = b"%s-%d-%d" % (self.name.encode(), len(done), len(txn.values))
            txn.values.append(value)
            self.producer.produce(self.topic, value, on_delivery=lambda err, msg, t=txn: (
                t.offsets.append(msg.offset()) if err is None else None))
        assert self.producer.flush(30) == 0

    def end(self, commit: bool, done: list[Txn]) -> None:
        txn, self.open = self.open, None
        assert txn is not None
        try:
            (self.producer.commit_transaction if commit else self.producer.abort_transaction)(30)
        except KafkaException as exc:  # cut by the kill: it aborts
            assert exc.args[0].txn_requires_abort(), exc
            self.producer.abort_transaction(30)
            commit = False
        txn.commit = commit
        done.append(txn)


def _pid(broker: KafkaStandalone, transactional_id: str) -> tuple[int, int]:
    raw = RawKafka(broker.bootstrap)
    try:
        (state,) = raw.call(65, 0, describe_transactions.DescribeTransactionsRequest(
            transactional_ids=(transactional_id,))).transaction_states
    finally:
        raw.close()
    return state.producer_id, state.producer_epoch


def _pulsar_txn(broker: KafkaStandalone, topic: str, producer_name: str, values: list[bytes], commit: bool) -> None:
    """A transaction of a Pulsar client (magnetar.client: the official Python client has none)."""
    client = magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(f"persistent://public/default/{topic}-partition-0",
                                          producer_name=producer_name, batching_enabled=False)
        txn = client.new_transaction(timeout=60)
        for value in values:
            producer.send(value, txn=txn)
        txn.commit() if commit else txn.abort()
    finally:
        client.close()


@pytest.fixture(scope="module", params=["kafka", "pulsar"])
def written(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[KafkaStandalone, Written]]:
    entry_format = request.param
    seed = int(os.environ.get("ABORTED_SEED", random.randrange(1 << 32)))
    print(f"seed {seed}")  # a failure replays with ABORTED_SEED=<seed>
    rng = random.Random(seed)
    broker = start_kafka_broker(tmp_path_factory.mktemp("aborted") / "data", "transactionCoordinatorEnabled=true",
                                f"entryFormat={entry_format}", *_CONFIGS[entry_format])
    try:
        topic = f"ab-{uuid.uuid4().hex[:8]}"
        plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        sent: list[tuple[int, bytes]] = []
        plain.produce(topic, b"plain-first", on_delivery=lambda err, msg: sent.append((msg.offset(), msg.value())))
        assert plain.flush(30) == 0
        a, b = _Transactional(broker, "a", topic), _Transactional(broker, "b", topic)
        pids = {name: _pid(broker, f"{topic}-{name}")[0] for name in ("a", "b")}
        spoof = f"pulsar-{max(pids.values()) + 1000}"  # a Kafka producer's id in its name, not its form
        done: list[Txn] = []
        pulsar_committed: list[bytes] = []
        pulsar_aborted: list[bytes] = []
        kill_at = rng.randint(6, 12)
        for step in range(22):
            if step == kill_at:  # with transactions open, whose markers come after the restart
                for producer in (a, b):
                    if producer.open is None:
                        producer.send(rng, done)
                broker.kill()
                broker.start()
                a.end(False, done)  # an abort the restart could not tell the producer of
            actor = rng.choice("aabbpc")
            if actor in "ab":
                (a if actor == "a" else b).send(rng, done)
            elif actor == "p":
                values = [b"p-%d-%d" % (step, i) for i in range(rng.randint(1, 2))]
                commit = rng.random() < 0.5
                _pulsar_txn(broker, topic, spoof, values, commit)
                (pulsar_committed if commit else pulsar_aborted).extend(values)
            else:
                plain.produce(topic, b"plain-%d" % step,
                              on_delivery=lambda err, msg: sent.append((msg.offset(), msg.value())))
                assert plain.flush(30) == 0
        for producer in (a, b):
            if producer.open is not None:
                producer.end(rng.random() < 0.5, done)
        b.send(rng, done)  # one committed for sure (the kill's abort is one aborted for sure)
        b.end(True, done)
        broker.kill()  # the list comes back after a restart
        broker.start()
        yield broker, Written(topic, pids, done, pulsar_committed, pulsar_aborted, sent)
    finally:
        broker.stop()


def _fetch(broker: KafkaStandalone, topic: str, offset: int, isolation_level: int = 1,
           partition_max_bytes: int = 1 << 24) -> Any:
    raw = RawKafka(broker.bootstrap)
    try:
        (answer,) = raw.call(1, 12, fetch_request(topic, {0: offset}, max_bytes=1 << 24,
                                                  partition_max_bytes=partition_max_bytes,
                                                  isolation_level=isolation_level)).responses[0].partitions
    finally:
        raw.close()
    return answer


def _batches(records: bytes) -> list[DefaultRecordBatch]:
    batches = []
    while len(records) >= 12:
        size = int.from_bytes(records[8:12], "big") + 12
        if size > len(records):
            break  # a partial batch at the end, as Kafka may send one
        batches.append(DefaultRecordBatch(bytearray(records[:size])))
        records = records[size:]
    return batches


def _listed(answer: Any) -> list[tuple[int, int]]:
    return [(a.producer_id, a.first_offset) for a in answer.aborted_transactions or ()]


def _aborted(written: Written) -> list[tuple[int, int, Txn]]:
    """(producer id, first offset, txn) of the aborted Kafka transactions with records stored, by first offset."""
    return sorted(((written.pids[t.producer], min(t.offsets), t) for t in written.txns
                   if t.commit is False and t.offsets), key=lambda a: a[1])


def test_read_committed_lists_the_aborted_kafka_transactions_and_their_markers(written) -> None:
    broker, w = written
    answer = _fetch(broker, w.topic, 0)
    assert _listed(answer) == [(pid, first) for pid, first, _ in _aborted(w)], (
        [(t.producer, t.offsets, t.commit) for t in w.txns],
        [line for line in broker.log().splitlines() if "ransaction" in line][-40:])
    assert _fetch(broker, w.topic, 0, isolation_level=0).aborted_transactions is None
    batches = _batches(bytes(answer.records or b""))
    values = [r.value for batch in batches if not batch.is_control_batch for r in batch]
    committed = sorted((o, v) for t in w.txns if t.commit for o, v in zip(t.offsets, t.values, strict=True))
    assert [v for v in values if not v.startswith(b"p-")] == [v for _, v in sorted(committed + w.plain)]
    assert [v for v in values if v.startswith(b"p-")] == w.pulsar_committed
    markers = [(batch.base_offset, batch.producer_id, struct.unpack(">hh", next(iter(batch)).key)[1])
               for batch in batches if batch.is_control_batch and batch.producer_id >= 0]
    assert len(markers) == len([t for t in w.txns if t.offsets]), (  # the Pulsar client's name none
        markers, [(b.base_offset, b.producer_id, b.is_control_batch) for b in batches],
        [(t.producer, t.offsets, t.commit) for t in w.txns],
        [line for line in broker.log().splitlines() if "ransaction" in line or "ERROR" in line][-40:])
    for txn in w.txns:
        if txn.offsets:  # its marker: the producer's first control batch after its records
            pid = w.pids[txn.producer]
            marker = next(m for m in markers if m[1] == pid and m[0] > max(txn.offsets))
            assert marker[2] == (_COMMIT if txn.commit else _ABORT), (txn, marker)


def test_fetches_from_anywhere_list_by_kafkas_rule(written) -> None:
    """Aborted transactions whose marker is at or after the fetch offset and whose first record
    is before the end of what the answer holds."""
    broker, w = written
    full = _batches(bytes(_fetch(broker, w.topic, 0).records or b""))
    ends = {batch.base_offset: batch.producer_id for batch in full if batch.is_control_batch}
    aborted = [(pid, first, next(o for o in sorted(ends) if o > max(t.offsets) and ends[o] == pid))
               for pid, first, t in _aborted(w)]
    rng = random.Random()
    last = full[-1].base_offset + full[-1].last_offset_delta
    for _ in range(12):
        offset = rng.randint(0, last)
        answer = _fetch(broker, w.topic, offset, partition_max_bytes=rng.randint(64, 600))
        served = _batches(bytes(answer.records or b""))
        if not served:
            assert _listed(answer) == []
            continue
        upper = served[-1].base_offset + served[-1].last_offset_delta + 1
        assert _listed(answer) == [(pid, first) for pid, first, marker in aborted
                                   if marker >= offset and first < upper], (offset, upper)


@pytest.mark.parametrize("read", READERS, ids=READER_IDS)
def test_read_committed_clients_get_exactly_the_committed_records(written, read) -> None:
    broker, w = written
    expected = [r.value for batch in _batches(bytes(_fetch(broker, w.topic, 0).records or b""))
                if not batch.is_control_batch for r in batch]
    assert read(broker.bootstrap, w.topic, len(expected)) == expected
