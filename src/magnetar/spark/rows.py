"""Stored entries -> Arrow record batches with the source's row schema (one row per message).

Both ways of reaching a topic (the data directory, the Pulsar protocol) end up holding raw
entries as the broker stored them, so both hand them to `RowBuilder` and the rows are the
same either way. Decoding lives in `magnetar.formats` (shared with the client's
`receive_arrow`); this module adds what only the Spark source has: the Spark schema and the
filters Spark pushes down.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.formats.columns import ARROW_SCHEMA, COLUMNS
from magnetar.formats.processor import ProcessorSet
from magnetar.formats.table import (
    BATCH_SIZE,
    KEEP_ENCRYPTED,
    MAX_BATCH_BYTES,
    MAX_UNCOMPRESSED_BYTES,
    SCHEMA_VERSION,
    TableBuilder,
    Undecryptable,
    UndecryptableEntryError,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

__all__ = ["ARROW_SCHEMA", "BATCH_SIZE", "COLUMNS", "MAX_BATCH_BYTES", "MAX_UNCOMPRESSED_BYTES", "SCHEMA_VERSION",
           "TIME_COLUMNS", "RowBuilder", "RowFilter", "apply_row_filter", "rows_of_entries", "spark_schema",
           "with_timestamps"]

TIME_COLUMNS = ("broker_time", "publish_time", "event_time", "deliver_at")
"""Epoch milliseconds in the decoded columns (as `receive_arrow` gives them); TimestampType in
Spark, as in Spark's Kafka source and the pulsar-spark connector."""
SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")


def spark_schema(value_type: pa.DataType | None = None) -> object:
    """The Spark StructType of the rows, `value` typed as `value_type` (default binary).
    Imported lazily: workers building rows need no JVM types."""
    from pyspark.sql.pandas.types import from_arrow_type  # noqa: PLC0415
    from pyspark.sql.types import (  # noqa: PLC0415
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    spark_types = {
        pa.string(): StringType(),
        pa.int32(): IntegerType(),
        pa.int64(): LongType(),
        pa.binary(): BinaryType(),
    }

    def spark_type(name: str, kind: pa.DataType) -> object:
        if name == "value" and value_type is not None:
            return from_arrow_type(value_type)
        if name == "properties":
            return MapType(StringType(), StringType())
        return TimestampType() if name in TIME_COLUMNS else spark_types[kind]

    return StructType([StructField(name, spark_type(name, kind)) for name, kind in COLUMNS])


def with_timestamps(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its millisecond time columns as Spark's timestamps (microseconds, UTC)."""
    columns = list(batch.columns)
    for name in TIME_COLUMNS:
        i = batch.schema.get_field_index(name)
        columns[i] = columns[i].cast(pa.timestamp("ms", tz="UTC")).cast(SPARK_TIMESTAMP)
    fields = [pa.field(f.name, SPARK_TIMESTAMP) if f.name in TIME_COLUMNS else f for f in batch.schema]
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Row-level bounds a reader applies exactly (pushed filters, offsets): all inclusive, None = open."""

    index_min: int | None = None
    index_max: int | None = None
    time_min: int | None = None
    time_max: int | None = None
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.index_min, self.index_max, self.time_min, self.time_max)) or bool(
            self.properties
        )


def _entry_rules_out(metadata: pb.MessageMetadata, wanted: tuple[tuple[str, str], ...]) -> bool:
    """Whether MessageMetadata alone proves that no message of the entry matches `wanted`.

    A non-batched entry's properties are its message's. A batch's MessageMetadata properties
    are batch-level properties (PIP-191): they hold for every message in it, so a key there with
    another value rules the whole entry out; an absent key proves nothing (C++ batches carry
    none), and those entries are decoded and filtered row by row.
    """
    if not wanted:
        return False
    present = {kv.key: kv.value for kv in metadata.properties}
    batched = metadata.HasField("num_messages_in_batch")
    for key, value in wanted:
        found = present.get(key)
        if found is None:
            if not batched:
                return True
        elif found != value:
            return True
    return False


class RowBuilder(TableBuilder):
    """A TableBuilder that skips entries and rows the pushed-down filters rule out."""

    def __init__(self, topic: str, partition: int, row_filter: RowFilter | None = None,
                 processors: ProcessorSet | None = None, extra_columns: Sequence[str] = (),
                 encrypted: Undecryptable = KEEP_ENCRYPTED) -> None:
        self.filter = row_filter or RowFilter()
        wanted = self.filter.properties
        super().__init__(topic, partition, processors,
                         (lambda metadata: _entry_rules_out(metadata, wanted)) if wanted else None,
                         extra_columns, encrypted)

    def flush(self) -> pa.RecordBatch | None:
        """The rows added since the last flush (filtered), or None if there are none."""
        batch = super().flush()
        return None if batch is None else apply_row_filter(batch, self.filter)


def _property_equals(batch: pa.RecordBatch, key: str, value: str) -> pa.Array:
    looked_up = pc.map_lookup(batch.column("properties"), pa.scalar(key, pa.string()), "first")
    return pc.fill_null(pc.equal(looked_up, pa.scalar(value, pa.string())), False)


def apply_row_filter(batch: pa.RecordBatch, row_filter: RowFilter) -> pa.RecordBatch | None:
    """Exactly the rows Spark's own evaluation of the pushed filters would keep (nulls fail)."""
    if not row_filter.active:
        return batch
    masks = []
    bounds = (
        ("index", row_filter.index_min, pc.greater_equal),
        ("index", row_filter.index_max, pc.less_equal),
        ("broker_time", row_filter.time_min, pc.greater_equal),
        ("broker_time", row_filter.time_max, pc.less_equal),
    )
    for column, bound, compare in bounds:
        if bound is not None:
            masks.append(pc.fill_null(compare(batch.column(column), pa.scalar(bound, pa.int64())), False))
    masks.extend(_property_equals(batch, key, value) for key, value in row_filter.properties)
    mask = masks[0]
    for other in masks[1:]:
        mask = pc.and_(mask, other)
    filtered = batch.filter(mask)
    return filtered if filtered.num_rows else None


def rows_of_entries(
    entries: Iterable[tuple[int, int, bytes | memoryview]],
    topic: str,
    partition: int,
    row_filter: RowFilter | None = None,
    rows_per_batch: int = 65536,
    processors: ProcessorSet | None = None,
    extra_columns: Sequence[str] = (),
    encrypted: Undecryptable = KEEP_ENCRYPTED,
) -> Iterable[pa.RecordBatch]:
    """Record batches of about `rows_per_batch` rows (or MAX_BATCH_BYTES of entries) from
    (ledger_id, entry_id, entry) triples, in any format `processors` read (default: the built-ins),
    with the entry columns `extra_columns` (SCHEMA_VERSION, BATCH_SIZE) after the row schema's;
    encrypted entries decrypted or not as `encrypted` says."""
    builder = RowBuilder(topic, partition, row_filter, processors, extra_columns, encrypted)
    for ledger_id, entry_id, data in entries:
        try:
            builder.add(ledger_id, entry_id, data)
        except UndecryptableEntryError as exc:
            raise UndecryptableEntryError(f"{exc} (give the option decryptionKeyFile=<its private key's PEM file>, "
                                          "or cryptoFailureAction=discard or consume)") from None
        if builder.rows >= rows_per_batch or builder.bytes >= MAX_BATCH_BYTES:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch
