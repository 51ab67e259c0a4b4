"""A function's log lines to its --log-topic, as Pulsar's instances send them there: what
its logger (`context.get_logger()`) records and what it prints."""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any, TextIO

import pulsar


class LogTopicHandler(logging.Handler):
    """Each record or printed line becomes one message; the producer's batching keeps this
    cheap, and a failed send is dropped (a log line never stops the function)."""

    def __init__(self, client: pulsar.Client, topic: str, fqfn: str, instance_id: int) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._producer = client.create_producer(topic, block_if_queue_full=False, batching_enabled=True,
                                                batching_max_publish_delay_ms=100)
        self._properties = {"function": fqfn, "instance": str(instance_id)}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.send(self.format(record), record.levelname)
        except Exception:
            self.handleError(record)

    def send(self, text: str, level: str) -> None:
        self._producer.send_async(text.encode(), _ignore, properties={**self._properties, "loglevel": level})

    def tee_output(self) -> None:
        """print() and writes to stderr go to the log topic as well as where they went."""
        sys.stdout = _Tee(sys.stdout, self, "INFO")
        sys.stderr = _Tee(sys.stderr, self, "ERROR")


class _Tee:
    """A text stream writing through to `stream` and sending each complete line to the topic."""

    def __init__(self, stream: TextIO, handler: LogTopicHandler, level: str) -> None:
        self._stream = stream
        self._handler = handler
        self._level = level
        self._pending = ""

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            with contextlib.suppress(Exception):  # a log line never stops the function
                self._handler.send(line, self._level)
        return written

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _ignore(_result: Any, _message_id: Any) -> None:
    return None
