"""A namespace that requires encryption refuses the Kafka listener's produce requests too: its
records are never encrypted the way Pulsar's clients encrypt, and the policy holds on every
protocol surface."""

from __future__ import annotations

import json
import uuid

import pytest
from admin_http import http
from kafka import KafkaProducer
from kafka.errors import PolicyViolationError


def test_produce_to_a_namespace_requiring_encryption_is_refused(kafka_broker) -> None:
    url = f"{kafka_broker.admin_url}/admin/v2/namespaces/public/default/encryptionRequired"
    topic = f"enc-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, retries=0)
    try:
        assert producer.send(topic, b"before").get(timeout=30).offset == 0
        assert http("POST", url, json.dumps(True).encode())[0] == 204
        with pytest.raises(PolicyViolationError):
            producer.send(topic, b"refused").get(timeout=30)
        assert http("POST", url, json.dumps(False).encode())[0] == 204
        assert producer.send(topic, b"after").get(timeout=30).offset == 1
    finally:
        producer.close()
        http("DELETE", url)
