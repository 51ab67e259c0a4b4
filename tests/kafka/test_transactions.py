"""Issue 41 item 6: a transactional producer gets what a Kafka broker without a transaction coordinator answers.

Kafka answers FindCoordinator for a transactional id with COORDINATOR_NOT_AVAILABLE while its
transaction state topic is unavailable, and InitProducerId from a broker that is not the id's
coordinator with NOT_COORDINATOR; clients retry both until their own timeout. This broker used
to answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients take as a fatal permission error
(with authorization off). Idempotent producers (no transactional id) are unaffected.

Issue 47, in process (a disk held, a loop's turns counted): EndTxn answered before its markers,
the producer's next transaction waiting for them; ListTransactions in chunks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError
from kafka_brokers import KafkaStandalone, batch, produce_request, start_kafka_broker
from kafka_in_process import held_writes, run_in_process
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.end_txn.v3 import request as end_txn
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as find_coordinator_v3
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.list_transactions.v1 import request as list_transactions
from racing_clients import JS

from magnetar.kafka import transactions as transactions_module
from magnetar.kafka.group_apis import NO_TRANSACTIONS
from magnetar.kafka.transactions import EXPIRATION_MS, EXPIRY_CHUNK
from magnetar.kafka.txn_apis import LIST_CHUNK

TRANSACTION, GROUP = 1, 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[KafkaStandalone]:
    started = start_kafka_broker(tmp_path_factory.mktemp("transactions"), "transactionCoordinatorEnabled=false")
    yield started
    started.stop()


def test_find_coordinator_and_init_producer_id_answer_as_a_broker_without_a_transaction_coordinator(tmp_path):
    async def test(kafka) -> None:
        for version in (1, 2, 3):
            found = await kafka.call(10, version, find_coordinator_v3.FindCoordinatorRequest(
                key="tx", key_type=TRANSACTION))
            assert (found.error_code, found.error_message) == (ErrorCode.coordinator_not_available,
                                                               NO_TRANSACTIONS)
            group = await kafka.call(10, version, find_coordinator_v3.FindCoordinatorRequest(
                key="g", key_type=GROUP))
            assert (group.error_code, group.port) == (ErrorCode.none, 9092)
        found = await kafka.call(10, 4, find_coordinator_v4.FindCoordinatorRequest(
            key_type=TRANSACTION, coordinator_keys=("a", "b")))
        assert [(c.key, c.error_code, c.error_message) for c in found.coordinators] == [
            ("a", ErrorCode.coordinator_not_available, NO_TRANSACTIONS),
            ("b", ErrorCode.coordinator_not_available, NO_TRANSACTIONS)]
        for transactional_id, expected in (("tx", ErrorCode.not_coordinator), (None, ErrorCode.none)):
            answer = await kafka.call(22, 4, init_producer_id.InitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1))
            assert answer.error_code == expected
            assert (answer.producer_id >= 0) == (transactional_id is None)

    run_in_process(tmp_path, test)


def test_librdkafka_times_out_retrying_as_against_kafka(broker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(2)
    error: KafkaError = refused.value.args[0]
    assert (error.code(), error.fatal(), error.retriable()) == (KafkaError._TIMED_OUT, False, True)


def test_kafka_python_times_out_retrying(broker) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex}",
                             max_block_ms=2000)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.init_transactions()
    finally:
        producer.close(0)


def test_aiokafka_keeps_looking_for_the_coordinator(broker) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex}")
        try:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(producer.start(), 2)  # without the error, start() returns
        finally:
            await producer.stop()

    asyncio.run(run())


def test_kafkajs_finds_no_coordinator(broker) -> None:
    out = subprocess.run(["node", str(JS / "transaction.js"), broker.bootstrap, f"t-{uuid.uuid4().hex}"],
                         check=True, capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == {"error": "KafkaJSGroupCoordinatorNotFound", "type": None,
                                      "message": "Failed to find group coordinator"}


class _Turns:
    """Another client on the event loop: it counts the turns it gets."""

    def __init__(self) -> None:
        self.count = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0)
            self.count += 1


def test_list_transactions_hands_the_loop_back_between_chunks_and_lists_every_id(tmp_path) -> None:
    """Issue 47 item 4: a broker keeps up to 100,000 transactional ids; ListTransactions looks
    at LIST_CHUNK of them a turn of the event loop, other clients served in between."""
    async def test(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        count = 3 * LIST_CHUNK + 7
        answers = await asyncio.gather(*(kafka.call(22, 4, init_producer_id.InitProducerIdRequest(
            transactional_id=f"id-{i}", transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1)) for i in range(count)))
        assert {answer.error_code for answer in answers} == {ErrorCode.none}
        other_client = _Turns()
        ticking = asyncio.ensure_future(other_client.run())
        await asyncio.sleep(0)
        other_client.count = 0
        listed = await kafka.call(66, 1, list_transactions.ListTransactionsRequest(
            state_filters=("Empty",), producer_id_filters=(), duration_filter=-1))
        ticking.cancel()
        assert sorted(state.transactional_id for state in listed.transaction_states) == sorted(
            f"id-{i}" for i in range(count))
        assert other_client.count >= count // LIST_CHUNK

    run_in_process(tmp_path, test, transactionCoordinatorEnabled=True)


async def _transactional_id_on_topic_t(kafka) -> tuple[tuple[int, int], add_partitions.AddPartitionsToTxnRequest]:
    """Topic t (one partition) and id tx's producer (id, epoch), with the AddPartitionsToTxn of t-0."""
    await kafka.apis.transactional().transactions.recover()
    kafka.apis.topics.create("t", 1)
    ids = await kafka.call(22, 4, init_producer_id.InitProducerIdRequest(
        transactional_id="tx", transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
        producer_epoch=-1))
    producer = (ids.producer_id, ids.producer_epoch)
    return producer, add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1],
        v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(name="t", partitions=(0,)),))


def test_end_txn_is_answered_before_its_markers_and_the_next_transaction_waits_for_them(tmp_path) -> None:
    """Issue 47 item 1: EndTxn is answered once the decision is durable, with the markers still
    held on their way to the disk; the producer's next AddPartitionsToTxn waits for them, so none
    of its records can precede them."""
    async def test(kafka) -> None:
        producer, add = await _transactional_id_on_topic_t(kafka)

        async def added() -> ErrorCode:
            return (await kafka.call(24, 3, add)).results_by_topic_v3_and_below[0].results_by_partition[0] \
                .partition_error_code

        assert await added() == ErrorCode.none
        stored = await kafka.call(0, 9, dataclasses.replace(
            produce_request("t", batch([b"in-txn"], (*producer, 0), transactional=True)), transactional_id="tx"))
        assert stored.responses[0].partition_responses[0].error_code == ErrorCode.none
        log = kafka.apis.topics.log("t", 0)
        with held_writes(kafka.service) as release:
            ended = await kafka.call(26, 3, end_txn.EndTxnRequest(
                transactional_id="tx", producer_id=producer[0], producer_epoch=producer[1], committed=True))
            assert ended.error_code == ErrorCode.none  # answered with the marker held
            assert log.end_offset() == 0  # readers wait for the marker
            next_one = asyncio.ensure_future(added())
            await asyncio.sleep(0.2)
            assert not next_one.done()  # the next transaction waits for the marker
            release.set()
            assert await next_one == ErrorCode.none
        assert log.end_offset() == 2  # the record and its marker

    run_in_process(tmp_path, test, transactionCoordinatorEnabled=True)


def test_init_producer_ids_at_once_each_get_an_epoch_of_their_own(tmp_path) -> None:
    """InitProducerId answers once the id's record is durable: those arriving meanwhile for the
    same id each get the next epoch, never one another's (two producers with one epoch would
    not fence each other)."""
    async def test(kafka) -> None:
        await kafka.apis.transactional().transactions.recover()
        request = init_producer_id.InitProducerIdRequest(
            transactional_id="tx", transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1)
        first = await kafka.call(22, 4, request)
        answers = await asyncio.gather(*(kafka.call(22, 4, request) for _ in range(5)))
        assert {answer.error_code for answer in answers} == {ErrorCode.none}
        assert {answer.producer_id for answer in answers} == {first.producer_id}
        assert sorted(answer.producer_epoch for answer in answers) == list(range(1, 6))

    run_in_process(tmp_path, test, transactionCoordinatorEnabled=True)


def test_the_expiry_pass_hands_the_loop_back_between_chunks_and_forgets_only_unused_ids(tmp_path) -> None:
    """Issue 47: ids unused for transactional.id.expiration.ms go, looked at EXPIRY_CHUNK a turn
    of the event loop (the broker keeps up to 100,000), other clients served in between; an id
    used again while the pass runs stays."""
    async def test(kafka) -> None:
        transactions = kafka.apis.transactional().transactions
        await transactions.recover()

        async def init(transactional_id: str) -> None:
            answer = await kafka.call(22, 4, init_producer_id.InitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1))
            assert answer.error_code == ErrorCode.none

        count = 2 * EXPIRY_CHUNK + 7
        await asyncio.gather(*(init(f"id-{i}") for i in range(count)))
        old = {i for i in range(count) if i % 3}
        for i in old:  # unused since longer ago than the expiration: as if time had passed
            transactions.ids[("public/default", f"id-{i}")].used -= EXPIRATION_MS + 1000
        other_client = _Turns()
        transactions._next_expiry = 0  # due now (a pass starts at most once a minute)
        transactions._expire()
        again = count - 1  # among the old, looked at last: used again once the pass is under way
        assert again in old
        ticking = asyncio.gather(other_client.run(), init(f"id-{again}"))
        await transactions.expiring
        ticking.cancel()
        assert sorted(transactional_id for _, transactional_id in transactions.ids) == sorted(
            f"id-{i}" for i in range(count) if i not in old or i == again)
        assert other_client.count >= count // EXPIRY_CHUNK

    run_in_process(tmp_path, test, transactionCoordinatorEnabled=True)


def test_at_the_id_cap_expired_ids_are_freed_before_a_new_id_is_decided(tmp_path, monkeypatch) -> None:
    """Issue 47: with the broker at its cap of transactional ids (lowered here from 100,000),
    an InitProducerId for a new id that finds expired ones waits for the expiry pass it starts,
    and gets its id; it is refused only when none expired."""
    monkeypatch.setattr(transactions_module, "MAX_TRANSACTIONAL_IDS", 20)

    async def test(kafka) -> None:
        transactions = kafka.apis.transactional().transactions
        await transactions.recover()

        async def init(transactional_id: str) -> ErrorCode:
            return (await kafka.call(22, 4, init_producer_id.InitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60),
                producer_id=-1, producer_epoch=-1))).error_code

        assert set(await asyncio.gather(*(init(f"id-{i}") for i in range(20)))) == {ErrorCode.none}
        transactions._next_expiry = 0  # a pass is due (one starts at most once a minute)
        assert await init("refused") == ErrorCode.transactional_id_authorization_failed  # none expired
        for i in range(5):  # unused since longer ago than the expiration: as if time had passed
            transactions.ids[("public/default", f"id-{i}")].used -= EXPIRATION_MS + 1000
        transactions._next_expiry = 0
        assert await init("new") == ErrorCode.none
        assert len(transactions.ids) == 16

    run_in_process(tmp_path, test, transactionCoordinatorEnabled=True)
