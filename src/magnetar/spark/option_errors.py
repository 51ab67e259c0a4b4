"""How the source and sink refuse an option: one error type, and the topic-name check every
option naming topics shares.

Kept apart from `options` so that the modules `options` builds on (pulsar-spark's message
ids) word their refusals the same way without importing it back.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from magnetar.wire.topic_name import InvalidTopicNameError, TopicName

_PLANNER = os.path.join("pyspark", "sql", "worker", "utils.py")


def _in_spark_planner() -> bool:
    """Whether this runs in a PySpark planning worker (`worker_run` on the stack): a process
    that reports one error to the JVM and exits."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "worker_run" and frame.f_code.co_filename.endswith(_PLANNER):
            return True
        frame = frame.f_back
    return False


class MagnetarOptionError(ValueError):
    """A bad option or input column; the message names it and what it accepts.

    Spark reports a planning worker's error as PYTHON_DATA_SOURCE_ERROR followed by the
    worker's formatted traceback, which puts the one useful line last. Raised in such a worker
    (which exits right after reporting), the traceback is left out (`sys.tracebacklimit = 0`),
    so the message follows `PYTHON_DATA_SOURCE_ERROR ...:` on the exception's first line.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        if _in_spark_planner():
            sys.tracebacklimit = 0


def fail(message: str) -> NoReturn:
    raise MagnetarOptionError(message)


def topic_name_option(name: str, option: str) -> TopicName:
    """A topic named in `option`, refused naming the option when Pulsar would refuse it."""
    try:
        return TopicName.parse(name.strip())
    except InvalidTopicNameError as exc:
        raise MagnetarOptionError(f"option {option!r}: {exc}") from None


def topic_option(name: str, option: str) -> str:
    return str(topic_name_option(name, option))
