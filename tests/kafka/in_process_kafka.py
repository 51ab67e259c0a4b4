"""A Kafka-listening broker in the test's own process (magnetar.testing's InProcessBroker): for
tests whose code under test must run in this process (mutation testing, scripts/mutation.py)."""

from __future__ import annotations

import logging
import re
from typing import Any

from magnetar.testing import InProcessBroker

_LISTENER = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+) \((\w+)\)")


class _Ports(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.ports: dict[str, int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        found = _LISTENER.search(record.getMessage())
        if found:
            self.ports[found.group(2)] = int(found.group(1))


def start(config: dict[str, Any]) -> tuple[InProcessBroker, dict[str, int]]:
    """A started broker with `config` (and a Kafka listener unless it names one) and its Kafka
    ports by listener protocol."""
    ports = _Ports()
    logger = logging.getLogger("magnetar.kafka.handler")
    logger.addHandler(ports)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        broker = InProcessBroker({"messagingProtocols": "kafka", "kafkaListeners": "PLAINTEXT://127.0.0.1:0",
                                  **config}).start()
    finally:
        logger.removeHandler(ports)
        logger.setLevel(previous)
    return broker, ports.ports
