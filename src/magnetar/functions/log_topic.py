"""Log lines of a function to its --log-topic, as Pulsar's instances send them there."""

from __future__ import annotations

import logging
from typing import Any

import pulsar


class LogTopicHandler(logging.Handler):
    """Each record becomes one message; the producer's batching keeps this cheap, and a failed
    send is dropped (a log line never stops the function)."""

    def __init__(self, client: pulsar.Client, topic: str, fqfn: str, instance_id: int) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._producer = client.create_producer(topic, block_if_queue_full=False, batching_enabled=True,
                                                batching_max_publish_delay_ms=100)
        self._properties = {"function": fqfn, "instance": str(instance_id)}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            properties = {**self._properties, "loglevel": record.levelname}
            self._producer.send_async(self.format(record).encode(), _ignore, properties=properties)
        except Exception:
            self.handleError(record)


def _ignore(_result: Any, _message_id: Any) -> None:
    return None
