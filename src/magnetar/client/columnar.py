"""`receive_arrow`: queued entries -> one pyarrow RecordBatch with the Spark source's row schema.

Once a consumer has been asked for Arrow, its event loop stops decoding entries into
messages: it checks the checksum, works out which batch indexes to keep (a redelivered
batch's unacked ones, those after a start position), and queues the raw entry as one
`RawEntry`. The reader's thread builds the columns of many entries at once in
`magnetar.formats.table` (no Python object per message), so decoding runs beside the
network thread. Messages queued before the switch are turned into rows one by one.

Rows are acknowledged per entry: `RowAcks` remembers which rows of a batch were acked until
all were (only a durable subscription acknowledges by row). What the reading side needs of
the consumer an entry came from is `RowOwner`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.client.incoming import BatchAcks
from magnetar.client.message import EntryContext, Message
from magnetar.formats.payload import PayloadError, UnknownFormatError
from magnetar.formats.processor import ProcessorSet
from magnetar.wire.errors import WireError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


class _ProcessorsConfig(Protocol):
    payload_processors: ProcessorSet | None


class RowOwner(Protocol):
    """The single-topic consumer behind a queued item, as receive/receive_arrow see it."""

    topic: str
    partition: int
    config: _ProcessorsConfig

    def taken(self, message: Message) -> None: ...
    def dropped_by_reader(self, count: int) -> None: ...
    def rows_taken(self, last: Message) -> None: ...
    def entry_unreadable(self, ledger: int, entry: int, exc: Exception, discard: bool) -> None: ...
    def keep_row_acks(self, ledger: int, entry: int, acks: BatchAcks) -> None: ...
    def ack_rows(self, ledger: int, entry: int, indexes: list[int]) -> None: ...
    def ack_row_cumulative(self, ledger: int, entry: int, index: int) -> None: ...


class RowAcks:
    """The batch acks of entries handed out as rows, by (ledger, entry), while some rows are unacked."""

    __slots__ = ("_acks", "durable")

    def __init__(self, durable: bool) -> None:
        self.durable = durable
        """Only a durable subscription acknowledges by row (a reader never acknowledges)."""
        self._acks: dict[tuple[int, int], BatchAcks] = {}

    def track(self, ledger: int, entry: int, acks: BatchAcks) -> None:
        """A batch queued raw (its acks start from the indexes not handed out)."""
        if self.durable:
            self._acks[(ledger, entry)] = acks

    def keep(self, ledger: int, entry: int, acks: BatchAcks) -> None:
        """A batch decoded into messages before the first receive_arrow: its messages' acks."""
        if self.durable:
            self._acks.setdefault((ledger, entry), acks)

    def size(self, ledger: int, entry: int, index: int) -> int:
        """The entry's batch size while its rows are not all acked (0: a whole entry), which tells a
        cumulative ack whether the row ends its entry."""
        acks = self._acks.get((ledger, entry))
        return 0 if acks is None or index < 0 else acks.size

    def ack(self, ledger: int, entry: int, indexes: list[int]) -> tuple[int, int, BatchAcks | None]:
        """Record acks of some rows of one entry; (index, batch size, acks) of the ack to send
        (index -1: the whole entry)."""
        acks = self._acks.get((ledger, entry))
        if acks is None or indexes[0] < 0:
            return -1, 0, None
        acks.acked.update(indexes[:-1])
        if len(acks.acked | {indexes[-1]}) >= acks.size:
            self._acks.pop((ledger, entry), None)
        return indexes[-1], acks.size, acks


class RawEntry:
    """One entry waiting in the receiver queue of a columnar consumer; `count` messages to hand out."""

    __slots__ = ("count", "entry", "keep", "ledger", "owner", "payload", "size")

    def __init__(self, owner: RowOwner, ledger: int, entry: int, payload: bytes, keep: Collection[int] | None,
                 count: int, size: int) -> None:
        self.owner = owner
        self.ledger = ledger
        self.entry = entry
        self.payload = payload
        self.keep = keep
        self.count = count
        self.size = size
        """Messages in the entry (num_messages_in_batch; 0 when not a batch)."""


class EntryFailure(ValueError):
    """An entry that could not be read: raised once by receive/receive_arrow, then reading goes on."""

    def __init__(self, owner: RowOwner, ledger: int, entry: int, cause: Exception) -> None:
        self.owner = owner
        self.message_id = (ledger, entry)
        self.cause = cause
        self.count = 1
        super().__init__(f"{owner.topic}: entry {ledger}:{entry} could not be read: {cause}")


def item_count(item: Any) -> int:
    """Messages an item of a receiver queue stands for (permits to give back when it is dropped)."""
    return item.count if type(item) is RawEntry or isinstance(item, EntryFailure) else 1


def item_owner(item: Any) -> Any:
    return item.owner if type(item) is RawEntry or isinstance(item, EntryFailure) else item[1].owner


def _message_rows(messages: list[Message]) -> pa.RecordBatch:
    """Rows of messages decoded before the consumer switched to Arrow (the slow path, once)."""
    import pyarrow as pa  # noqa: PLC0415

    from magnetar.formats.columns import ARROW_SCHEMA  # noqa: PLC0415

    columns: dict[str, list] = {name: [] for name in ARROW_SCHEMA.names}
    for message in messages:
        ctx = message[1]
        bem = ctx.broker_metadata
        index = message.index()
        values = (ctx.topic, ctx.partition, ctx.ledger, ctx.entry, message[0][2], index,
                  bem.broker_timestamp if bem is not None and bem.HasField("broker_timestamp") else None,
                  ctx.metadata.publish_time, message.event_timestamp() or None, message.partition_key() or None,
                  list(message.properties().items()), message.data(), ctx.metadata.producer_name,
                  message._fields().sequence_id,
                  ctx.metadata.deliver_at_time if ctx.metadata.HasField("deliver_at_time") else None)
        for name, value in zip(ARROW_SCHEMA.names, values, strict=True):
            columns[name].append(value)
    return pa.RecordBatch.from_pydict(columns, schema=ARROW_SCHEMA)


def _last_taken(owner: RowOwner, item: RawEntry, batch_index: int) -> Message:
    """A stand-in Message for the last row handed out (readers resume after it)."""
    ctx = EntryContext(owner, owner.topic, None, None, 0, item.size, item.ledger, item.entry,  # type: ignore[arg-type]
                       owner.partition)
    return Message.of(ctx, None, b"", batch_index)


def _keep_row_acks(ctx: Any) -> None:
    """A batch decoded into messages before receive_arrow was first called becomes rows too: its
    owner must know the batch's size and acked indexes, as for a raw entry, or acknowledging
    some of its rows would ack the whole entry."""
    if ctx.batch_size > 0:
        ctx.owner.keep_row_acks(ctx.ledger, ctx.entry, ctx.acks if ctx.acks is not None else BatchAcks(ctx.batch_size))


class ArrowBuilder:
    """Builds one RecordBatch from items taken off a receiver queue, in queue order."""

    def __init__(self) -> None:
        from magnetar.formats.table import TableBuilder  # noqa: PLC0415 (needs pyarrow)

        self._table_builder = TableBuilder
        self.batches: list[pa.RecordBatch] = []
        self.failure: EntryFailure | None = None
        self._builder: Any = None
        self._owner: Any = None
        self._messages: list[Message] = []

    def add(self, item: Any) -> bool:
        """Take one queue item; False when it failed (then `failure` says why and nothing was added)."""
        if isinstance(item, EntryFailure):
            self.failure = item
            return False
        if type(item) is not RawEntry:
            self._flush_builder()
            self._messages.append(item)
            _keep_row_acks(item[1])
            item[1].owner.taken(item)
            return True
        self._flush_messages()
        owner = item.owner
        if owner is not self._owner:
            self._flush_builder()
            processors: ProcessorSet = owner.config.payload_processors or ProcessorSet([])
            self._builder = self._table_builder(owner.topic, owner.partition, processors)
            self._owner = owner
        try:
            rows = self._builder.add(item.ledger, item.entry, item.payload, item.keep)
        except (WireError, PayloadError) as exc:
            owner.entry_unreadable(item.ledger, item.entry, exc, discard=not isinstance(exc, UnknownFormatError))
            self.failure = EntryFailure(owner, item.ledger, item.entry, exc)
            owner.dropped_by_reader(item.count)
            return False
        owner.dropped_by_reader(item.count)  # taken: the permits go back
        if rows:
            owner.rows_taken(_last_taken(owner, item, item.size - 1 if item.size else -1))
        return True

    def _flush_builder(self) -> None:
        if self._builder is not None:
            batch = self._builder.flush()
            if batch is not None:
                self.batches.append(batch)
            self._builder = self._owner = None

    def _flush_messages(self) -> None:
        if self._messages:
            self.batches.append(_message_rows(self._messages))
            self._messages = []

    def result(self) -> pa.RecordBatch | None:
        import pyarrow as pa  # noqa: PLC0415

        self._flush_builder()
        self._flush_messages()
        if not self.batches:
            return None
        if len(self.batches) == 1:
            return self.batches[0]
        return pa.concat_batches(self.batches)


def ack_rows(batch: pa.RecordBatch, owner_of: Any) -> None:
    """Acknowledge every row of a batch receive_arrow returned, one call per entry it covers
    (an entry's rows are adjacent; where (ledger, entry) changes is found in C)."""
    import pyarrow.compute as pc  # noqa: PLC0415

    rows = batch.num_rows
    if not rows:
        return
    ledgers, entries = batch.column("ledger_id"), batch.column("entry_id")
    changed = pc.or_(pc.not_equal(ledgers.slice(1), ledgers.slice(0, rows - 1)),
                     pc.not_equal(entries.slice(1), entries.slice(0, rows - 1)))
    bounds = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist()), rows]
    indexes, topics = batch.column("batch_index"), batch.column("topic")
    for start, stop in itertools.pairwise(bounds):
        owner = owner_of(topics[start].as_py())
        owner.ack_rows(ledgers[start].as_py(), entries[start].as_py(), indexes.slice(start, stop - start).to_pylist())


def last_rows(batch: pa.RecordBatch) -> list[tuple[str, int, int, int]]:
    """(topic, ledger_id, entry_id, batch_index) of each topic's last row: where a cumulative
    acknowledgement of the batch stops, per topic as Pulsar's multi-topic consumer acks."""
    import pyarrow.compute as pc  # noqa: PLC0415

    if not batch.num_rows:
        return []
    topics = batch.column("topic")
    ledgers, entries, indexes = batch.column("ledger_id"), batch.column("entry_id"), batch.column("batch_index")
    out = []
    for topic in pc.unique(topics).to_pylist():
        row = pc.indices_nonzero(pc.equal(topics, topic))[-1].as_py()
        out.append((topic, ledgers[row].as_py(), entries[row].as_py(), indexes[row].as_py()))
    return out


class ArrowReceiving:
    """What a consumer handle keeps between receive_arrow calls: rows beyond the last call's
    `max_messages`, and an entry failure met after rows were already built."""

    def __init__(self) -> None:
        self.leftover: pa.RecordBatch | None = None
        self.failure: EntryFailure | None = None

    def pending(self, max_messages: int) -> pa.RecordBatch | None:
        """What an earlier call left (raising its failure first), or None."""
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if self.leftover is None:
            return None
        batch, rest = self.leftover.slice(0, max_messages), self.leftover.slice(max_messages)
        self.leftover = rest if rest.num_rows else None
        return batch

    def take(self, first: Any, get_nowait: Any, max_messages: int) -> pa.RecordBatch:
        """Rows of `first` and of whatever is queued behind it, up to about `max_messages`."""
        builder = ArrowBuilder()
        total, item = 0, first
        while item is not None:
            if not builder.add(item):
                break
            total += item_count(item)
            if total >= max_messages:
                break
            item = get_nowait()
        batch = builder.result()
        if builder.failure is not None:
            if batch is None or not batch.num_rows:
                raise builder.failure
            self.failure = builder.failure
        assert batch is not None
        if batch.num_rows > max_messages:
            self.leftover = batch.slice(max_messages)
            batch = batch.slice(0, max_messages)
        return batch


def not_a_message(item: Any) -> Exception:
    """What receive() raises for a queue item that is no message (and the permits it gives back)."""
    from magnetar.client import errors  # noqa: PLC0415

    item_owner(item).dropped_by_reader(item_count(item))
    if isinstance(item, EntryFailure):
        return item
    return errors.InvalidConfiguration("this consumer reads with receive_arrow(); receive() cannot follow it")
