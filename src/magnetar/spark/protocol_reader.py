"""Reading topics over the Pulsar protocol (the `service.url` option): not implemented yet.

Planned design: a small blocking reader on `magnetar.wire` (CONNECT announcing
supports_broker_entry_metadata, LOOKUP, a non-durable exclusive SUBSCRIBE at a start
message id, FLOW permits, MESSAGE frames) that hands the raw entries it receives to
`rows.RowBuilder`, so rows are the same as from a data dir. The official Python client
was ruled out: it shows neither the broker index nor broker time, and it yields one
Python object per message, which would cap a Spark core far below the storage path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from magnetar.spark.offsets import TopicPartition
from magnetar.spark.options import MagnetarOptionError, SourceOptions


@dataclass(frozen=True, slots=True)
class MessageRange:
    tp: TopicPartition


def _not_yet(options: SourceOptions) -> MagnetarOptionError:
    return MagnetarOptionError(
        f"option 'service.url' ({options.service_url}): reading over the Pulsar protocol is not implemented yet; "
        "read the broker's data directory with 'path' instead"
    )


def plan_batch(options: SourceOptions, pushed: object, keeps: Callable, bounds_of: Callable) -> list[MessageRange]:
    raise _not_yet(options)


def read_messages(options: SourceOptions, work: MessageRange) -> Iterator[pa.RecordBatch]:
    raise _not_yet(options)
