"""Stored entries of one topic partition -> Arrow record batches, one row per message.

The Spark source and `Consumer.receive_arrow` both hold raw entries as the broker stored them
and both end here, so a message gives the same row whichever way it was read and whatever
format wrote it. Per-entry columns (ids, times, producer) are kept once per entry and repeated
per row in C at the end; per-message columns come in runs: ready Arrow columns from a
processor (a Pulsar batch of the common shape, an Arrow entry), or messages decoded one by one
gathered into flat buffers (`PendingColumns`) that become a run when sealed.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.formats.columns import (
    ARROW_SCHEMA,
    MessageColumns,
    PendingColumns,
    concat_runs,
    int_column,
    zero_as_null,
)
from magnetar.formats.payload import EntryPayload
from magnetar.formats.processor import ProcessorSet, all_builtins
from magnetar.wire.batch import decompressed_payload
from magnetar.wire.entry import PULSAR_FORMAT, entry_format, parse_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024
"""Refuse to inflate a payload beyond this (a corrupt `uncompressed_size` must not OOM a worker)."""

MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Emit a record batch once its entries hold this much, whatever the row count: 65536 rows of
1 MB messages would otherwise be 64 GB in one batch (and overflow Arrow's 32-bit offsets)."""


SCHEMA_VERSION = "schema_version"
"""An entry column added on request: the writer's schema version (`MessageMetadata.schema_version`
as a number, -1 when absent), which typed reads decode values with."""
BATCH_SIZE = "batch_size"
"""An entry column added on request: the messages in the row's batch (0 when not batched), which
a serialized message id carries."""
EXTRA_COLUMNS = {SCHEMA_VERSION: pa.int64(), BATCH_SIZE: pa.int32()}

Decrypt = Callable[[pb.MessageMetadata, memoryview], bytes | None]
"""An encrypted entry's payload decrypted, or None when no key opens it (the client's Decryptor)."""


class Undecryptable(NamedTuple):
    """What to do with encrypted entries: `decrypt` them (None: no key), and with one that no
    key opens, `action`: "consume" (one row of the payload as stored, encrypted and compressed,
    as the official clients' CONSUME delivers it), "discard" (no row), or "fail"
    (UndecryptableEntryError)."""

    decrypt: Decrypt | None
    action: str


KEEP_ENCRYPTED = Undecryptable(None, "consume")


class UndecryptableEntryError(ValueError):
    """An encrypted entry no key opens, where the reader was told to fail on one."""


class EntryColumnsOfRows(NamedTuple):
    """The columns whose value is the entry's, repeated for each of its rows."""

    ledger_id: pa.Array
    entry_id: pa.Array
    index: pa.Array
    broker_time: pa.Array
    publish_time: pa.Array
    producer_name: pa.Array
    deliver_at: pa.Array


_ZERO = pa.scalar(0, pa.int32())


class _EntryColumns:
    """One value per entry, repeated per row only at the end, in C (run-end decoding)."""

    def __init__(self, extra: Collection[str]) -> None:
        self.schema_versions = SCHEMA_VERSION in extra
        """Kept only when asked: reading the field costs a protobuf access per entry."""
        self.batch_sizes = BATCH_SIZE in extra
        """Kept only when asked (pulsar-spark's message ids), as receive_arrow never asks."""
        self.row_ends = array("i")
        self.ledger_id = array("q")
        self.entry_id = array("q")
        self.publish_time = array("q")
        self.producer_name: list[str] = []
        self.index_shift: list[int | None] = []
        """The PIP-70 index of the entry's first message: a row's index is this plus its batch index."""
        self.broker_time: list[int | None] = []
        self.deliver_at: list[int | None] = []
        """PIP-26's deliver_at_time of the entry (a delayed message is never batched with others)."""
        self.batch_size = array("i")
        self.schema_version = array("q")

    def add(
        self,
        ledger_id: int,
        entry_id: int,
        metadata: pb.MessageMetadata,
        bem: pb.BrokerEntryMetadata | None,
        first_row: int,
        count: int,
        size: int,
        batched: bool,
    ) -> None:
        """`count` rows of an entry of `size` messages (fewer rows when some were left out)."""
        self.row_ends.append(first_row + count)
        self.ledger_id.append(ledger_id)
        self.entry_id.append(entry_id)
        self.publish_time.append(metadata.publish_time)
        self.producer_name.append(metadata.producer_name)
        has_index = bem is not None and bem.HasField("index")
        self.index_shift.append(bem.index - size + 1 if has_index else None)
        self.broker_time.append(bem.broker_timestamp if bem is not None and bem.HasField("broker_timestamp") else None)
        self.deliver_at.append(metadata.deliver_at_time if metadata.HasField("deliver_at_time") else None)
        if self.batch_sizes:
            self.batch_size.append(size if batched else 0)
        if self.schema_versions:
            raw = metadata.schema_version
            self.schema_version.append(int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else -1)

    def _per_row(self, values: pa.Array) -> pa.Array:
        ends = int_column(self.row_ends, pa.int32())
        return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, values))

    def extra(self, name: str) -> pa.Array:
        """One of EXTRA_COLUMNS, per row."""
        values = self.schema_version if name == SCHEMA_VERSION else self.batch_size
        return self._per_row(int_column(values, EXTRA_COLUMNS[name]))

    def columns(self, rows: int, batch_index: pa.Array) -> EntryColumnsOfRows:
        per_row = self._per_row
        index = per_row(pa.array(self.index_shift, pa.int64()))
        if index.null_count < rows:
            index = pc.add(index, pc.max_element_wise(batch_index, _ZERO))
        return EntryColumnsOfRows(
            per_row(int_column(self.ledger_id, pa.int64())),
            per_row(int_column(self.entry_id, pa.int64())),
            index,
            per_row(pa.array(self.broker_time, pa.int64())),
            per_row(int_column(self.publish_time, pa.int64())),
            per_row(pa.array(self.producer_name, pa.string())),
            per_row(pa.array(self.deliver_at, pa.int64())),
        )


class TableBuilder:
    """Accumulates the messages of entries of one topic partition, then emits a RecordBatch."""

    def __init__(self, topic: str, partition: int, processors: ProcessorSet | None = None,
                 skip_entry: Callable[[pb.MessageMetadata], bool] | None = None,
                 extra_columns: Sequence[str] = (), encrypted: Undecryptable = KEEP_ENCRYPTED) -> None:
        unknown = set(extra_columns) - set(EXTRA_COLUMNS)
        if unknown:
            raise ValueError(f"no such entry column: {', '.join(sorted(unknown))}")
        self.extra_columns = tuple(extra_columns)
        """EXTRA_COLUMNS to add after ARROW_SCHEMA's, in this order."""
        self._schema = pa.schema([*ARROW_SCHEMA, *(pa.field(n, EXTRA_COLUMNS[n]) for n in self.extra_columns)])
        self.topic = topic
        self.partition = partition
        self.processors = processors if processors is not None else all_builtins()
        self.skip_entry = skip_entry
        """Rules an entry out from MessageMetadata alone (pushed-down filters)."""
        self.encrypted = encrypted
        self.entries_decoded = 0
        self.entries_skipped = 0
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.bytes = 0
        self._entries = _EntryColumns(self.extra_columns)
        self._runs: list[MessageColumns] = []
        self._pending = PendingColumns()

    def add(self, ledger_id: int, entry_id: int, entry: bytes | memoryview,
            keep: Collection[int] | None = None) -> int:
        """Decode one stored entry (prefix, checksum, metadata, payload in any known format).

        `keep`: only these batch indexes (a redelivered batch's unacked messages). Returns the
        rows added. Raises WireError / PayloadError with nothing added when the entry is bad.
        """
        parsed = parse_entry(entry)
        metadata = parsed.metadata
        # a marker (a transaction's, a replicated subscription's) holds no message: never a row
        if metadata.HasField("marker_type") or (self.skip_entry is not None and self.skip_entry(metadata)):
            self.entries_skipped += 1
            return 0
        self.entries_decoded += 1
        payload = parsed.payload
        sealed = False
        if metadata.encryption_keys:
            opened = self._decrypted(ledger_id, entry_id, metadata, payload)
            if opened is None:
                return 0
            sealed = opened is payload
            payload = opened
        count = self._add_messages(parsed.broker_entry_metadata, metadata, payload, keep, sealed)
        if not count:
            return 0
        batched = metadata.HasField("num_messages_in_batch") and not sealed
        size = metadata.num_messages_in_batch if batched else 1
        self._entries.add(ledger_id, entry_id, metadata, parsed.broker_entry_metadata, self.rows, count, size, batched)
        self.rows += count
        self.bytes += max(len(entry), metadata.uncompressed_size)
        return count

    def _decrypted(self, ledger_id: int, entry_id: int, metadata: pb.MessageMetadata,
                   payload: memoryview) -> memoryview | None:
        """The plaintext to read; the payload itself for an entry kept as stored; None for none."""
        decrypt, action = self.encrypted
        plain = None if decrypt is None else decrypt(metadata, payload)
        if plain is not None:
            return memoryview(plain)
        if action == "discard":
            return None
        if action == "fail":
            raise UndecryptableEntryError(
                f"{self.topic}: entry {ledger_id}:{entry_id} is encrypted and "
                f"{'no private key was given' if decrypt is None else 'the private key given does not open it'}")
        return payload

    def _add_messages(self, bem: pb.BrokerEntryMetadata | None, metadata: pb.MessageMetadata,
                      payload: memoryview, keep: Collection[int] | None, sealed: bool) -> int:
        """The entry's per-message columns; returns how many messages it holds. A `sealed`
        (still encrypted) entry is one row carrying its payload as stored."""
        if sealed:
            self._pending.add_whole_entry(metadata, payload)
            return 1
        fmt = entry_format(metadata) if metadata.properties else PULSAR_FORMAT
        payload = memoryview(decompressed_payload(metadata, payload, max_size=MAX_UNCOMPRESSED_BYTES))
        if fmt == PULSAR_FORMAT and not metadata.HasField("num_messages_in_batch") and (
                self.processors.catch_all is None):
            self._pending.add_whole_entry(metadata, payload)
            return 1
        unit = EntryPayload(bem, metadata, payload, fmt)
        run = self.processors.columns(unit) if keep is None else None
        if run is None:
            messages = self.processors.messages(unit)
            if keep is not None:
                messages = [m for m in messages if m[2] in keep]
            return self._pending.add_batch(metadata, messages)
        self._seal()
        self._runs.append(run)
        return len(run.value)

    def _seal(self) -> None:
        """Turn the messages decoded one by one since the last run into a run of their own."""
        if self._pending.count:
            self._runs.append(self._pending.seal())
            self._pending = PendingColumns()

    def flush(self) -> pa.RecordBatch | None:
        """The rows added since the last flush, or None if there are none."""
        if not self.rows:
            return None
        count = self.rows
        self._seal()
        messages = concat_runs(self._runs)
        entries = self._entries.columns(count, messages.batch_index)
        columns = [
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            entries.ledger_id,
            entries.entry_id,
            messages.batch_index,
            entries.index,
            entries.broker_time,
            entries.publish_time,
            zero_as_null(messages.event_time),
            messages.key,
            messages.properties,
            messages.value,
            entries.producer_name,
            messages.sequence_id,
            entries.deliver_at,
            *(self._entries.extra(name) for name in self.extra_columns),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)
