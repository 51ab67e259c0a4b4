"""Reading topics over the Pulsar protocol (the `service.url` option)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from magnetar.spark.offsets import TopicPartition
from magnetar.spark.options import SourceOptions


@dataclass(frozen=True, slots=True)
class MessageRange:
    tp: TopicPartition


def plan_batch(options: SourceOptions, pushed: object, keeps: Callable, bounds_of: Callable) -> list[MessageRange]:
    raise NotImplementedError("service.url")


def read_messages(options: SourceOptions, work: MessageRange) -> Iterator[pa.RecordBatch]:
    raise NotImplementedError("service.url")
