"""The delayed-dispatch pipeline: PIP-26's "function way" of delayed delivery, on Spark.

`delayed_dispatch(spark, input_topic, output_topic, ...)` starts a structured-streaming
query that reads the input topic (magnetar's stream source), keeps each message whose
deliver time is still ahead in Spark state (`transformWithStateInPandas`, one group and
one timer per message), and writes it to the output topic (magnetar's stream sink) in the
first micro-batch whose timestamp has reached that time. Plain consumers of the output
topic then need no delayed delivery in the broker.

- Never early: Spark fires a processing-time timer only in a micro-batch whose batch
  timestamp is at or past it, and the sink publishes after that. (Processing time, not
  event time: a deliver time is a wall-clock instant, and an event-time watermark stops
  advancing when the input goes quiet, which would hold every pending message back.)
- Exactly once across restarts: the pending messages and their timers live in the
  checkpointed state store, offsets in the checkpoint; a replayed micro-batch keeps its
  batch timestamp, so it fires the same timers and emits the same rows, which the sink
  writes under the same producer names and sequence ids, and the output topic's
  deduplication (which must be on) drops what was stored before.
- The deliver time is the message's `deliver_at_time` (PIP-26's MessageMetadata field,
  set by the producer's `deliver_at`/`deliver_after`: the source's `deliver_at` column),
  or, when `deliver_at_property` names one, that property (epoch milliseconds) where
  present (a value that is not a number counts as absent). A message without a deliver
  time, or whose time has passed when it arrives, goes straight through.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

import magnetar.spark
from magnetar.spark.options import MagnetarOptionError

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
OUTPUT_SCHEMA = "key string, value binary, properties map<string,string>"
STATE_SCHEMA = "key string, value binary, properties string, deliver_at long"


class DelayedDispatcher(StatefulProcessor):
    """One message per grouping key (its id): emitted now, or held until its timer fires."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getValueState("pending", STATE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        due = []
        for frame in rows:
            for row in frame.itertuples(index=False):
                deliver_at = None if pd.isna(row.deliver_at) else int(row.deliver_at)
                if deliver_at is None or deliver_at <= now:
                    due.append((row.key, row.value, row.properties))
                else:
                    self.pending.update((row.key, row.value, _encode(row.properties), deliver_at))
                    self.handle.registerTimer(deliver_at)
        if due:
            yield _frame(due)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        held = self.pending.get()
        if held is None:
            return
        self.pending.clear()
        yield _frame([(held[0], held[1], _decode(held[2]))])

    def close(self) -> None:
        """Nothing to release: state belongs to Spark."""


def _encode(properties: Any) -> str:
    return json.dumps(dict(properties) if properties is not None else {})


def _decode(raw: str) -> dict[str, str]:
    return dict(json.loads(raw))


def _frame(rows: list[tuple[Any, Any, Any]]) -> pd.DataFrame:
    """Output rows; properties as dicts (PySpark's form of a map; Arrow hands over pairs)."""
    return pd.DataFrame({"key": [r[0] for r in rows], "value": [bytes(r[1]) for r in rows],
                         "properties": [dict(r[2]) if r[2] is not None else {} for r in rows]})


def delayed_dispatch(spark: Any, input_topic: str, output_topic: str, *, service_url: str,
                     checkpoint_location: str, deliver_at_property: str | None = None,
                     trigger_interval: str = "100 milliseconds", query_name: str | None = None,
                     source_options: dict[str, str] | None = None) -> Any:
    """Start the pipeline; returns its StreamingQuery.

    `service_url` (pulsar://) is the broker read from and written to; the output topic
    needs deduplication on (`brokerDeduplicationEnabled` or the namespace/topic policy)
    for exactly once. `checkpoint_location` keeps offsets and pending messages: restart
    with the same one to resume. `source_options` go to the stream source as given (e.g.
    `maxMessagesPerTrigger`; `startingOffsets` defaults to earliest).
    """
    if deliver_at_property is not None and not deliver_at_property.strip():
        raise MagnetarOptionError("delayed_dispatch: deliver_at_property must name a message property (or be None)")
    from pyspark.sql import functions as f  # noqa: PLC0415

    magnetar.spark.register(spark)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    reader = spark.readStream.format(magnetar.spark.FORMAT).option("service.url", service_url)
    options = {"startingOffsets": "earliest", **(source_options or {})}
    source = reader.option("topic", input_topic).options(**options).load()
    message_id = f.concat_ws(":", "topic", "partition", "ledger_id", "entry_id", "batch_index")
    deliver_at = f.unix_millis("deliver_at")
    if deliver_at_property is not None:
        deliver_at = f.coalesce(f.element_at("properties", f.lit(deliver_at_property)).cast("long"), deliver_at)
    messages = source.select(message_id.alias("id"), "key", "value", "properties", deliver_at.alias("deliver_at"))
    released = messages.groupBy("id").transformWithStateInPandas(
        statefulProcessor=DelayedDispatcher(), outputStructType=OUTPUT_SCHEMA, outputMode="Update",
        timeMode="ProcessingTime")
    writer = (released.writeStream.format(magnetar.spark.FORMAT).option("service.url", service_url)
              .option("topic", output_topic).option("checkpointLocation", checkpoint_location)
              .trigger(processingTime=trigger_interval))
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
