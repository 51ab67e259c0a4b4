"""Fixtures for client tests: one broker per module (with PIP-70 exposure on), and the two clients.

Every scenario runs against both the official `pulsar-client` and `magnetar.client`
through the same code: the facade has the official API, so a test only picks the module.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import pulsar
import pytest

import magnetar.client
import magnetar.testing
from magnetar.testing import StandaloneBroker

BROKER_CONFIG = {
    "brokerEntryMetadataInterceptors": [
        "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor",
        "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
    ],
    "exposingBrokerEntryMetadataToClientEnabled": True,
    "delayedDeliveryTickTimeMillis": 100,
}


@pytest.fixture(scope="module")
def shared_broker() -> Iterator[StandaloneBroker]:
    """In a thread of the test process (magnetar.testing): these tests never kill or restart it."""
    with magnetar.testing.standalone(BROKER_CONFIG) as broker:
        yield broker


@dataclass
class Api:
    """One of the two clients under test."""

    name: str
    module: ModuleType
    url: str
    clients: list

    def client(self, **kwargs):
        kwargs.setdefault("operation_timeout_seconds", 10)
        if self.module is pulsar:
            kwargs.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        client = self.module.Client(self.url, **kwargs)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                client.close()


CLIENTS = {"official": pulsar, "magnetar": magnetar.client}


@pytest.fixture(params=list(CLIENTS))
def api(request, shared_broker) -> Iterator[Api]:
    handle = Api(request.param, CLIENTS[request.param], shared_broker.service_url, [])
    yield handle
    handle.close()


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"
