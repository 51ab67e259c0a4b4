"""The `magnetar` PySpark Python Data Source: batch and streaming reads of topics.

The reader objects are pickled from the planning worker to the executors, so they carry
only options and plans (plain data); files and sockets are opened where rows are read.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import TimestampType

from magnetar.client.connection import PulsarClientError
from magnetar.spark.message_id_lookup import requested_index
from magnetar.spark.offsets import (
    EARLIEST_INDEX,
    LATEST_INDEX,
    StreamOffset,
    TopicPartition,
    cap_by_messages,
    from_stream_offset,
    to_stream_offset,
)
from magnetar.spark.options import MagnetarOptionError, SourceOptions, parse_options
from magnetar.spark.protocol_reader import MessageRange, ProtocolTopics, read_messages
from magnetar.spark.pulsar_spark_rows import pulsar_spark_fields, pulsar_spark_rows
from magnetar.spark.rows import BATCH_SIZE, SCHEMA_VERSION, spark_schema, with_timestamps
from magnetar.spark.storage_reader import (
    Bounds,
    EntryRange,
    MagnetarDataLossError,
    Plan,
    StorageTopics,
    missing_entry_metadata,
    read_range,
    resolve_index,
    tighter,
    with_index_bounds,
)
from magnetar.spark.topic_schemas import ValueSchemas, value_schemas
from magnetar.spark.value_decoding import ValueDecoder
from magnetar.spark.value_types import UnsupportedSchemaError, value_type
from magnetar.spark.worker_heap import freeze_long_lived
from magnetar.spark.write_options import parse_write_options
from magnetar.spark.writer import MagnetarBatchWriter, MagnetarStreamWriter

Topics = StorageTopics | ProtocolTopics
_R = TypeVar("_R")
log = logging.getLogger(__name__)
_INTERCEPTORS = ("org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
                 "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor")
RECONNECT_SECONDS = 30.0
_SEARCHED_COLUMNS = {("index",): "index", ("broker_time",): "time"}


@dataclass(slots=True)
class PushedFilters:
    """The filters the source evaluates itself: kept exact, so Spark need not re-check them."""

    bounds: Bounds = field(default_factory=Bounds)
    topics: set[str] | None = None
    partitions: set[int] | None = None
    accepted: list[str] = field(default_factory=list)

    def accept(self, f: Filter) -> bool:
        """Absorb `f` if it is one the source handles exactly; False leaves it to Spark."""
        column = f.attribute
        if column in _SEARCHED_COLUMNS and self._accept_bound(_SEARCHED_COLUMNS[column], f):
            self.accepted.append(repr(f))
            return True
        if column in (("topic",), ("partition",)) and isinstance(f, EqualTo | In):
            values = set(f.value) if isinstance(f, In) else {f.value}
            if column == ("topic",) and all(isinstance(v, str) for v in values):
                self.topics = values if self.topics is None else self.topics & values
            elif column == ("partition",) and all(isinstance(v, int) for v in values):
                self.partitions = values if self.partitions is None else self.partitions & values
            else:
                return False
            self.accepted.append(repr(f))
            return True
        return False

    def _accept_bound(self, kind: str, f: Filter) -> bool:
        value = getattr(f, "value", None)
        if kind == "time" and isinstance(value, datetime.datetime):
            bounds = _millisecond_bounds(f, TimestampType().toInternal(value))
        elif kind == "index" and isinstance(value, int) and not isinstance(value, bool):
            bounds = _integer_bounds(f, value)
        else:
            return False
        if bounds is None:
            return False
        low, high = bounds
        b = self.bounds
        if kind == "index":
            self.bounds = with_index_bounds(b, low, high)
        else:
            self.bounds = replace(b, time_min=tighter(max, b.time_min, low), time_max=tighter(min, b.time_max, high))
        return True

    def keeps(self, tp: TopicPartition) -> bool:
        return (self.topics is None or tp.topic in self.topics) and (
            self.partitions is None or tp.partition in self.partitions
        )


def _integer_bounds(f: Filter, value: int) -> tuple[int | None, int | None] | None:
    """Inclusive (low, high) of `column <op> value` over integers; None for another filter."""
    return _bounds(f, value, value)


def _millisecond_bounds(f: Filter, micros: int) -> tuple[int | None, int | None] | None:
    """Inclusive millisecond (low, high) of `time <op> t` for a timestamp `t` in microseconds:
    times are whole milliseconds, so `>= 10:00:00.0005` starts at .001 and `= .0005` is empty."""
    return _bounds(f, micros // 1000, -(-micros // 1000))


def _bounds(f: Filter, floor: int, ceil: int) -> tuple[int | None, int | None] | None:
    """Inclusive integer (low, high) of `column <op> x`, x lying between `floor` and `ceil`
    (equal when x is itself an integer)."""
    if isinstance(f, EqualTo):
        return (floor, floor) if floor == ceil else (ceil, floor)
    if isinstance(f, GreaterThan):
        return floor + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return ceil, None
    if isinstance(f, LessThan):
        return None, ceil - 1
    if isinstance(f, LessThanOrEqual):
        return None, floor
    return None


class MagnetarPartition(InputPartition):
    """One Spark partition: an entry range (path) or a message range (service.url), as `value`."""

    def __init__(self, work: EntryRange | MessageRange) -> None:
        super().__init__(work)


class MagnetarDataSource(DataSource):
    """`spark.read.format("magnetar")` / `spark.readStream.format("magnetar")`."""

    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> object:
        # Called when the DataFrame is defined: check options (and, for a data dir, that the
        # topics exist) here, so mistakes surface at load() and not inside a task.
        options = parse_options(self.options, streaming=None)
        kind = self._found_values(options).kind
        if options.pulsar_spark_rows:
            try:
                return from_arrow_type(pa.struct(pulsar_spark_fields(kind or pa.binary())))
            except ValueError as exc:
                raise MagnetarOptionError(str(exc)) from exc
        return spark_schema(kind)

    def reader(self, schema: object) -> DataSourceReader:
        options = parse_options(self.options, streaming=False)
        return MagnetarBatchReader(options, self._found_values(options).schemas)

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        options = parse_options(self.options, streaming=True)
        return MagnetarStreamReader(options, self._found_values(options).schemas)

    def _found_values(self, options: SourceOptions) -> FoundValues:
        """Found once per query: Spark pickles this object after schema() and calls reader()
        on the copy, so what schema() found comes along (reader() alone finds it when the
        user gave the schema)."""
        if "_found" not in self.__dict__:
            self._found = value_schemas_of(options)
        return self._found

    def writer(self, schema: object, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        return MagnetarBatchWriter(parse_write_options(self.options, schema))

    def streamWriter(self, schema: object, overwrite: bool) -> DataSourceStreamWriter:
        _append_only(overwrite)
        return MagnetarStreamWriter(parse_write_options(self.options, schema))


class AutoRegisteredDataSource(MagnetarDataSource):
    """The source PySpark registers by itself (`pyspark_magnetar.DefaultSource`, SPARK-45917).

    Such a session may not have filter pushdown enabled, and Spark fails a pushdown reader
    there, so batch reads take no filters; `magnetar.spark.register(spark)` replaces it with
    the pushdown reader and enables pushdown."""

    def reader(self, schema: object) -> DataSourceReader:
        options = parse_options(self.options, streaming=False)
        return PlainBatchReader(options, self._found_values(options).schemas)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise MagnetarOptionError("a topic can only be appended to: use mode('append') (or outputMode('append'))")


class FoundValues(NamedTuple):
    """What types and decodes the `value` column: the topics' schemas and their Spark type
    (both None: binary)."""

    schemas: ValueSchemas | None
    kind: pa.DataType | None


def value_schemas_of(options: SourceOptions) -> FoundValues:
    """The schemas that type and decode the `value` column, checking that the topics exist.
    Called when the DataFrame is defined, so mistakes (a schema without a Spark type, such as
    a recursive record) surface at load()."""
    try:
        with contextlib.closing(topics_of(options)) as topics:
            tps = topics.resolve(options)
        if not options.typed_values:
            return FoundValues(None, None)
        schemas = value_schemas(options, list(dict.fromkeys(tp.topic for tp in tps)))
        return FoundValues(schemas, None if schemas is None else value_type(schemas.latest))
    except PulsarClientError as exc:
        raise MagnetarOptionError(f"option 'service.url': {exc}") from exc
    except UnsupportedSchemaError as exc:
        raise MagnetarOptionError(f"the topic's schema: {exc}") from exc


def topics_of(options: SourceOptions) -> Topics:
    """The driver's view of what `path` or `service.url` names."""
    if options.path is not None:
        return StorageTopics(options.path)
    assert options.service_url is not None
    return ProtocolTopics(options.service_url, options.security)


def said_missing_entry_metadata(topics: Topics, tps: Iterable[TopicPartition], options: SourceOptions) -> bool:
    """Say in the job's log, once, when a partition's first or last entry lacks PIP-70's
    prefix (or a field of it): its rows read `index`/`broker_time` as null, so a filter or
    offset on them finds nothing, and nothing else would tell the user why. Two entry reads
    a partition until one lacks it, so callers pass only the partitions read by index or
    broker time (every one for streams, whose offsets are indexes); True when said."""
    for tp in tps:
        missing = sorted({column for entry in topics.edge_entries(tp) for column in missing_entry_metadata(entry)})
        if missing:
            sending = (" and send it to clients with exposingBrokerEntryMetadataToClientEnabled=true"
                       if options.service_url is not None else "")
            log.warning(
                "magnetar: %s has entries without PIP-70 broker entry metadata: their %s read as null, and filters "
                "and offsets on %s skip them. Brokers stamp it with brokerEntryMetadataInterceptors=%s%s "
                "(magnetar standalone's default); entries stored before stay as they are",
                tp.storage_topic, " and ".join(missing), "it" if len(missing) == 1 else "them", _INTERCEPTORS,
                sending,
            )
            return True
    return False


def _read(options: SourceOptions, partition: InputPartition, schemas: ValueSchemas | None) \
        -> Iterator[pa.RecordBatch]:
    # Spark reads one partition of None when partitions() planned nothing (nothing matched).
    work = getattr(partition, "value", None)
    if work is None:
        return
    freeze_long_lived()
    batches = _read_rows(options, work, _extra_columns(options, schemas))
    if schemas is not None:
        decoder = ValueDecoder(schemas.latest, schemas.writers(options, work.tp.topic))
        batches = (typed_values(batch, decoder) for batch in batches)
    yield from (map(pulsar_spark_rows, batches) if options.pulsar_spark_rows else batches)


def typed_values(batch: pa.RecordBatch, decoder: ValueDecoder) -> pa.RecordBatch:
    """The batch with its `value` column decoded, without the schema version column."""
    at = batch.schema.get_field_index("value")
    value = decoder.column(batch.column(at), batch.column(SCHEMA_VERSION), batch.column("key"))
    batch = batch.drop_columns([SCHEMA_VERSION])
    return batch.set_column(at, pa.field("value", decoder.type), value)


def _extra_columns(options: SourceOptions, schemas: ValueSchemas | None) -> tuple[str, ...]:
    """The entry columns the rows need beyond the row schema's, dropped once used: the writer's
    schema version to decode typed values, the batch size for pulsar-spark's `__messageId`."""
    wanted = ((SCHEMA_VERSION, schemas is not None), (BATCH_SIZE, options.pulsar_spark_rows))
    return tuple(name for name, needed in wanted if needed)


def _read_rows(options: SourceOptions, work: EntryRange | MessageRange, extra_columns: tuple[str, ...]) \
        -> Iterator[pa.RecordBatch]:
    if isinstance(work, EntryRange):
        assert options.path is not None
        batches = read_range(options.path, work, options.fail_on_data_loss, options.payload_processors, extra_columns,
                             options.decryption)
    else:
        batches = read_messages(options, work, extra_columns)
    for batch in batches:
        yield with_timestamps(batch)


def _batch_bounds(options: SourceOptions, tp: TopicPartition, pushed: Bounds, topics: Topics) -> Bounds:
    """Pushed filters narrowed by startingOffsets/endingOffsets and startingTime/endingTime."""
    bounds = replace(
        pushed,
        entry_time_min=options.starting_time.time_for(tp),
        entry_time_end=options.ending_time.time_for(tp),
        properties=options.properties_filter,
    )
    start = requested_index(options.starting, tp, topics, ending=False)
    end = requested_index(options.ending, tp, topics, ending=True)
    low = None if start in (EARLIEST_INDEX, LATEST_INDEX) else start
    high = None if end in (EARLIEST_INDEX, LATEST_INDEX) else end - 1
    if start == LATEST_INDEX:
        low = resolve_index(topics, tp, LATEST_INDEX)
        if low is None:  # nothing with an index stored: latest means nothing at all
            high = -1
    return with_index_bounds(bounds, low, high)


class PlainBatchReader(DataSourceReader):
    """A batch read that receives no filters: Spark refuses to plan a reader implementing
    pushFilters while spark.sql.python.filterPushdown.enabled is off, its default."""

    def __init__(self, options: SourceOptions, schemas: ValueSchemas | None = None) -> None:
        self.options = options
        self.schemas = schemas
        self.pushed = PushedFilters()

    def plan(self) -> list[Plan]:
        """The ranges to read of every topic partition the pushed filters keep."""
        options = self.options
        plans = []
        with contextlib.closing(topics_of(options)) as topics:
            bounded = []  # the partitions read by broker index or time: only they need the prefix
            for tp in (tp for tp in topics.resolve(options) if self.pushed.keeps(tp)):
                bounds = _batch_bounds(options, tp, self.pushed.bounds, topics)
                plans.append(topics.plan(tp, bounds, options.split_size_bytes, options.fail_on_data_loss))
                if bounds.on_entry_metadata:
                    bounded.append(tp)
            said_missing_entry_metadata(topics, bounded, options)
        return plans

    def partitions(self) -> Sequence[InputPartition]:
        return [MagnetarPartition(r) for plan in self.plan() for r in plan.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, self.schemas)


class MagnetarBatchReader(PlainBatchReader):
    """A batch read with filter pushdown (what `register()` enables)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            if not self.pushed.accept(f):
                yield f


def _reconnecting(method: Callable[..., _R]) -> Callable[..., _R]:
    """A stream's driver keeps one connection for the query's life. When the broker goes
    away (a restart, say), retry on fresh connections with backoff for up to
    RECONNECT_SECONDS, as the official client reconnects, before failing the query."""

    @functools.wraps(method)
    def call(self: MagnetarStreamReader, *args: object) -> _R:
        deadline = time.monotonic() + RECONNECT_SECONDS
        delay = 0.1
        while True:
            try:
                return method(self, *args)
            except PulsarClientError:
                if self.options.service_url is None or time.monotonic() + delay > deadline:
                    raise
                self.stop()
                time.sleep(delay)  # backoff before reconnecting, not synchronisation
                delay = min(delay * 2, 2.0)

    return call


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between offsets that are each topic partition's next PIP-70 index."""

    def __init__(self, options: SourceOptions, schemas: ValueSchemas | None = None) -> None:
        self.options = options
        self.schemas = schemas
        self._topics: Topics | None = None
        self._target: dict[TopicPartition, int] | None = None
        self._checked_entry_metadata = False

    @_reconnecting
    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to what is stored now, then stop."""
        self._target = self._next_indexes()

    def __getstate__(self) -> dict[str, object]:
        # Executors get a copy of the reader: open files and sockets stay with the driver.
        return {"options": self.options, "schemas": self.schemas, "_topics": None, "_target": self._target,
                "_checked_entry_metadata": self._checked_entry_metadata}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    @property
    def topics(self) -> Topics:
        if self._topics is None:
            self._topics = topics_of(self.options)
        return self._topics

    def stop(self) -> None:
        if self._topics is not None:
            self._topics.close()
            self._topics = None

    def _next_indexes(self) -> dict[TopicPartition, int]:
        """Each partition's next index; EARLIEST_INDEX while it has no entry yet."""
        topics = self.topics
        out = {}
        for tp in topics.resolve(self.options):
            latest = topics.next_index(tp)
            if latest is None and topics.first_index(tp) is None and topics.has_entries(tp):
                raise MagnetarOptionError(
                    f"{tp.storage_topic} has entries without a broker index: streams need the "
                    "AppendIndexMetadataInterceptor in brokerEntryMetadataInterceptors (and, read over 'service.url', "
                    "exposingBrokerEntryMetadataToClientEnabled=true)"
                )
            out[tp] = EARLIEST_INDEX if latest is None else latest
        return out

    @_reconnecting
    def initialOffset(self) -> StreamOffset:
        options = self.options
        topics = self.topics
        out: dict[TopicPartition, int] = {}
        for tp, latest in self._next_indexes().items():
            starting_time = options.starting_time.time_for(tp)
            if starting_time is not None:
                index = topics.index_at_time(tp, starting_time)
                out[tp] = latest if index is None else index
                continue
            wanted = requested_index(options.starting, tp, topics, ending=False)
            resolved = resolve_index(topics, tp, wanted)
            out[tp] = EARLIEST_INDEX if resolved is None else resolved
        return to_stream_offset(out)

    def _resolved_start(self, start: dict[TopicPartition, int], tp: TopicPartition) -> int:
        index = start.get(tp, EARLIEST_INDEX)
        if index == EARLIEST_INDEX:
            first = self.topics.first_index(tp)
            return EARLIEST_INDEX if first is None else first
        return index

    @_reconnecting
    def latestOffset(self, start: StreamOffset, limit: ReadLimit) -> StreamOffset:
        begin = from_stream_offset(start)
        latest = self._next_indexes()
        if self._target is not None:
            latest = {tp: min(index, self._target.get(tp, EARLIEST_INDEX)) for tp, index in latest.items()}
        begin = {tp: self._resolved_start(begin, tp) for tp in latest}
        if isinstance(limit, ReadMaxRows):
            latest = cap_by_messages(begin, latest, limit.max_rows)
        for tp, index in begin.items():  # never move backwards (e.g. a partition emptied by retention)
            latest[tp] = max(latest[tp], index)
        return to_stream_offset(latest)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages_per_trigger is not None:
            return ReadMaxRows(self.options.max_messages_per_trigger)
        return ReadAllAvailable()

    @_reconnecting
    def partitions(self, start: StreamOffset, end: StreamOffset) -> Sequence[InputPartition]:
        begin = from_stream_offset(start)
        finish = from_stream_offset(end)
        topics = self.topics
        out = []
        for tp, stop in finish.items():
            first = self._resolved_start(begin, tp)
            if stop < 0 or (first >= 0 and stop <= first):
                continue
            bounds = Bounds(properties=self.options.properties_filter)
            bounds = with_index_bounds(bounds, first if first >= 0 else None, stop - 1)
            plan = topics.plan(tp, bounds, self.options.split_size_bytes, self.options.fail_on_data_loss)
            out.extend(MagnetarPartition(r) for r in plan.ranges)
        if not self._checked_entry_metadata:  # the first micro-batch's partitions; later ones cost no probes
            said_missing_entry_metadata(topics, finish, self.options)
            self._checked_entry_metadata = True
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, self.schemas)


__all__ = ["AutoRegisteredDataSource", "MagnetarDataLossError", "MagnetarDataSource"]
