"""Issue 47: a Kafka transaction whose coordinator record failed to name a partition can only
abort. A commit of it is refused and ends it aborted: it used to stay PrepareCommit, and
every later request of its producer (a new InitProducerId too) was CONCURRENT_TRANSACTIONS.

librdkafka meets this after a transient failure of the transaction log: AddPartitionsToTxn
answered KAFKA_STORAGE_ERROR is retried, succeeds, and the transaction goes on to its commit.
The log's writes are failed here by a gate on its futures (`failing_log`), whatever the log
does underneath.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from committed_readers import confluent, kafka_python
from kafka_brokers import KafkaStandalone
from kafka_in_process import fetch_request, run_in_process
from kio.schema.errors import ErrorCode
from test_kafka_txn_crash_edges import TOPIC, Producer


@contextlib.contextmanager
def failing_log(kafka) -> Iterator[None]:
    """Every transaction-log write asked for in the block fails once it is done (as a commit
    that could not be made)."""
    log = kafka.service.transactions.log
    write = log.write

    def failing(key, encode):
        failed = asyncio.get_running_loop().create_future()
        write(key, encode).add_done_callback(lambda _: failed.set_exception(OSError("injected: disk gone")))
        return failed

    log.write = failing
    try:
        yield
    finally:
        del log.write  # the class's method again


async def _settled(kafka):
    """Partition 0 read_committed once the last transaction's marker is in (EndTxn is answered before it)."""
    for _ in range(500):
        part = (await kafka.call(1, 12, fetch_request(TOPIC, {0: 0}, isolation_level=1))).responses[0].partitions[0]
        if part.last_stable_offset == part.high_watermark:
            return part
        await asyncio.sleep(0.01)
    raise AssertionError(f"the last stable offset stayed at {part.last_stable_offset}")


def test_a_commit_of_a_transaction_that_can_only_abort_ends_it_aborted(tmp_path) -> None:
    async def test(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        producer = await Producer.start(kafka)
        with failing_log(kafka):
            assert await producer.add_partition() == ErrorCode.kafka_storage_error
        assert await producer.add_partition() == ErrorCode.none  # the client's retry
        assert await producer.produce([b"lost"]) == ErrorCode.none
        assert await producer.end(True) == ErrorCode.invalid_txn_state  # it could only abort
        assert await producer.end(False) == ErrorCode.none  # what the client does next
        part = await _settled(kafka)
        assert [a.producer_id for a in part.aborted_transactions] == [producer.ids[0]]
        # the producer's next transaction commits as ever
        assert await producer.add_partition() == ErrorCode.none
        assert await producer.produce([b"kept"]) == ErrorCode.none
        assert await producer.end(True) == ErrorCode.none
        part = await _settled(kafka)
        assert part.high_watermark == 4  # lost, its abort marker, kept, its commit marker

    run_in_process(tmp_path / "data", test, transactionCoordinatorEnabled=True)
    broker = KafkaStandalone(tmp_path / "data", ["transactionCoordinatorEnabled=true"], args=["--kafka", "0"]).start()
    try:
        for read in (confluent, kafka_python):
            assert read(broker.bootstrap, TOPIC, 1) == [b"kept"]
    finally:
        broker.stop()
