"""Issue 47: AddPartitionsToTxn is answered once the record adding its partitions is on its
way to the transaction log, and the Produce that follows stores its records once that record
is durable (the client's Produce comes while the log commits, not after).

The transaction log's commits are gated here (`gated_log`): each write's future is done
once the gate opens (or fails with the gate's error), whatever the log does underneath, so
the tests hold what a slow or failing commit holds without depending on how the log writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Iterator

import pytest
from committed_readers import confluent, kafka_python
from confluent_kafka import Producer as ConfluentProducer
from kafka_brokers import KafkaStandalone, RawKafka
from kafka_in_process import fetch_request, run_in_process
from kio.schema.errors import ErrorCode
from test_kafka_txn_crash_edges import FORMATS, TOPIC, Producer, copy_as_killed


class _Gate:
    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.error: BaseException | None = None
        self.held = 0
        """Writes asked for while the gate was shut."""

    def open(self, error: BaseException | None = None) -> None:
        self.error = error
        self.opened.set()


@contextlib.contextmanager
def gated_log(kafka) -> Iterator[_Gate]:
    """Every transaction-log write asked for in the block is done only once the gate opens."""
    log = kafka.service.transactions.log
    gate = _Gate()
    write = log.write

    def gated(key, encode):
        written = write(key, encode)
        if gate.opened.is_set():
            return written
        gate.held += 1
        done = asyncio.get_running_loop().create_future()

        async def later() -> None:
            await gate.opened.wait()
            try:
                await written
            except Exception as exc:
                done.set_exception(exc)
                return
            if gate.error is None:
                done.set_result(None)
            else:
                done.set_exception(gate.error)

        held = asyncio.ensure_future(later())
        done.add_done_callback(lambda _: held)  # keeps the task referenced until it is done
        return done

    log.write = gated
    try:
        yield gate
    finally:
        gate.open(gate.error)
        del log.write  # the class's method again


@contextlib.contextmanager
def held_log_commits(store) -> Iterator[None]:
    """The transaction log's commits (made on its thread, `magnetar-txn-log`) wait until the
    block ends: nothing they write is on disk meanwhile."""
    release = threading.Event()
    transaction = store.transaction

    def held():
        if threading.current_thread().name.startswith("magnetar-txn-log"):
            release.wait()
        return transaction()

    store.transaction = held
    try:
        yield
    finally:
        release.set()
        del store.transaction


async def _answered(call) -> tuple[asyncio.Task, bool]:
    """The call as a task, and whether it was answered within a few loop turns."""
    task = asyncio.ensure_future(call)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if task.done():
            return task, True
    return task, False


async def _fetch(kafka, isolation_level: int):
    return (await kafka.call(1, 12, fetch_request(TOPIC, {0: 0}, isolation_level=isolation_level))
            ).responses[0].partitions[0]


async def _settled(kafka):
    """Partition 0 read_committed once the last transaction's marker is in (EndTxn is answered before it)."""
    for _ in range(500):
        part = await _fetch(kafka, 1)
        if part.last_stable_offset == part.high_watermark:
            return part
        await asyncio.sleep(0.01)
    raise AssertionError(f"the last stable offset stayed at {part.last_stable_offset}")


def test_a_produce_is_answered_once_the_record_adding_its_partition_is_durable(tmp_path) -> None:
    async def test(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        producer = await Producer.start(kafka)
        with gated_log(kafka) as gate:
            assert await asyncio.wait_for(producer.add_partition(), 5) == ErrorCode.none  # not waiting for the log
            assert gate.held  # the record adding the partition is held
            produced, answered = await _answered(producer.produce([b"a", b"b"]))
            assert not answered
            assert (await _fetch(kafka, 0)).high_watermark == 0  # nothing stored before the record naming them
            gate.open()
            assert await asyncio.wait_for(produced, 10) == ErrorCode.none
        assert await producer.end(True) == ErrorCode.none
        committed = await _settled(kafka)
        assert (committed.last_stable_offset, committed.aborted_transactions) == (3, ())  # two records, a marker

    run_in_process(tmp_path / "data", test, transactionCoordinatorEnabled=True)


def test_a_record_adding_a_partition_that_fails_fails_the_produce_and_the_transaction_only_aborts(tmp_path) -> None:
    async def test(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        producer = await Producer.start(kafka)
        with gated_log(kafka) as gate:
            assert await producer.add_partition() == ErrorCode.none
            produced, answered = await _answered(producer.produce([b"lost"]))
            assert not answered
            gate.open(OSError("disk gone"))
            assert await asyncio.wait_for(produced, 10) == ErrorCode.kafka_storage_error
        assert (await _fetch(kafka, 0)).high_watermark == 0  # never stored
        # its partition is no longer added: a record there is refused, a commit is too
        assert await producer.produce([b"again"]) == ErrorCode.invalid_txn_state
        assert await producer.end(True) != ErrorCode.none
        assert await producer.end(False) == ErrorCode.none
        # the next transaction commits as ever, and is all there is
        assert await producer.add_partition() == ErrorCode.none
        assert await producer.produce([b"kept"]) == ErrorCode.none
        assert await producer.end(True) == ErrorCode.none
        part = await _settled(kafka)
        assert (part.high_watermark, part.aborted_transactions) == (2, ())  # kept and its marker

    run_in_process(tmp_path / "data", test, transactionCoordinatorEnabled=True)


@pytest.mark.parametrize("entry_format", FORMATS)
def test_a_sigkill_before_the_record_adding_a_partition_is_durable_aborts_its_records(tmp_path, entry_format):
    """AddPartitionsToTxn answered, its record not durable, the Produce waiting for it: killed
    there, the restart has no trace of the transaction (a record stored before the one naming
    its partition would be read by Kafka clients as if no abort came: its marker could not
    name its producer); the producer's retried batch is refused, its next transaction is read."""
    config = {"transactionCoordinatorEnabled": True, "entryFormat": entry_format}
    snapshot, ids = tmp_path / "crashed", []

    async def before(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        producer = await Producer.start(kafka)
        ids.append(producer.ids)
        with held_log_commits(kafka.service.metadata):
            assert await asyncio.wait_for(producer.add_partition(), 5) == ErrorCode.none
            produced, answered = await _answered(producer.produce([b"lost1", b"lost2"]))
            assert not answered
            copy_as_killed(tmp_path / "data", snapshot)
        await produced

    run_in_process(tmp_path / "data", before, **config)

    async def restarted(kafka) -> None:
        kafka.service.transactions.recover()
        await kafka.apis.transactional().transactions.recover()
        producer = Producer(kafka, ids[0])
        assert await producer.produce([b"lost1", b"lost2"]) == ErrorCode.invalid_txn_state  # the retry
        assert await producer.end(False) == ErrorCode.none  # what a client does after it
        assert await producer.add_partition() == ErrorCode.none
        assert await producer.produce([b"kept"]) == ErrorCode.none
        assert await producer.end(True) == ErrorCode.none
        await _settled(kafka)  # readers are not held back

    run_in_process(snapshot, restarted, **config)
    broker = KafkaStandalone(snapshot, ["transactionCoordinatorEnabled=true", f"entryFormat={entry_format}"],
                             args=["--kafka", "0"]).start()
    try:
        for read in (confluent, kafka_python):
            assert read(broker.bootstrap, TOPIC, 1) == [b"kept"]
    finally:
        broker.stop()


def test_many_producers_committing_at_once_are_read_exactly_by_read_committed_clients(
        txn_broker: KafkaStandalone) -> None:
    """Eight librdkafka transactional producers on one partition, each transaction committed
    or aborted at random: both read_committed clients read exactly the committed records."""
    rng = random.Random()
    topic = f"many-{rng.randrange(1 << 30)}"
    raw = RawKafka(txn_broker.bootstrap)
    try:
        raw.create_topic(topic)
    finally:
        raw.close()
    committed: list[bytes] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def run(index: int, plan: list[bool]) -> None:
        try:
            producer = ConfluentProducer({"bootstrap.servers": txn_broker.bootstrap,
                                          "transactional.id": f"{topic}-{index}", "linger.ms": 5})
            producer.init_transactions(30)
            for number, commit in enumerate(plan):
                values = [f"{index}-{number}-{i}".encode() for i in range(20)]
                producer.begin_transaction()
                for value in values:
                    producer.produce(topic, value, partition=0)
                if commit:
                    producer.commit_transaction(30)
                    with lock:
                        committed.extend(values)
                else:
                    producer.abort_transaction(30)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i, [rng.random() < 0.7 for _ in range(10)])) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures and not any(thread.is_alive() for thread in threads)
    for read in (confluent, kafka_python):
        assert sorted(read(txn_broker.bootstrap, topic, len(committed))) == sorted(committed)
