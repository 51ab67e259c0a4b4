"""Issue 41 item 6: a transactional producer gets what a Kafka broker without a transaction coordinator answers.

Kafka answers FindCoordinator for a transactional id with COORDINATOR_NOT_AVAILABLE while its
transaction state topic is unavailable, and InitProducerId from a broker that is not the id's
coordinator with NOT_COORDINATOR; clients retry both until their own timeout. This broker used
to answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which clients take as a fatal permission error
(with authorization off). Idempotent producers (no transactional id) are unaffected.
"""

from __future__ import annotations

import asyncio
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
from kafka_brokers import KafkaStandalone, start_kafka_broker
from kafka_in_process import run_in_process
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3 import request as find_coordinator_v3
from kio.schema.find_coordinator.v4 import request as find_coordinator_v4
from kio.schema.init_producer_id.v4 import request as init_producer_id
from racing_clients import JS

from magnetar.kafka.group_apis import NO_TRANSACTIONS

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
