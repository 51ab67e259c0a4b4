"""A `magnetar standalone --kafka 0` per module and entry format (tests/kafka/kafka_brokers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_brokers import KafkaStandalone, start_kafka_broker


@pytest.fixture(scope="module", params=["pulsar", "kafka"])
def kafka_broker(request, tmp_path_factory) -> Iterator[KafkaStandalone]:
    """One broker per module and entryFormat: tests use topics of their own."""
    broker = start_kafka_broker(tmp_path_factory.mktemp("kafka"), f"entryFormat={request.param}")
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory) -> Iterator[KafkaStandalone]:
    """One broker per module with the transaction coordinator on: tests use ids and topics of their own."""
    broker = start_kafka_broker(tmp_path_factory.mktemp("kafka-txn"), "transactionCoordinatorEnabled=true")
    yield broker
    broker.stop()
