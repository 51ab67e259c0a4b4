"""The bucket tracker: a durable index whose far future lives in the metadata store.

Time is cut into buckets of `bucket_ms` (delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds).
Only buckets that may hold due messages (start <= now + early allowance) are
loaded into the heap; every other entry costs one membership bit in memory and
24 bytes in storage, so a message due in a week pins no more than one due in a
minute. Every entry is also written to storage (buffered, then sealed as a
segment when `flush_threshold` entries are waiting), including near ones, so
storage always holds the complete index as of the last flush.

Storage (metadata store, next to the cursor it belongs to, under
`storage/ml/<topic>/delayed/<subscription>/<index id>/`):
- `seg/<bucket>/<seq>`: a segment, little-endian int64 triples (deliver_at, ledger, entry);
- `members/<ledger>`: the portable roaring bitmap of held entry ids of that ledger;
- `buckets`: JSON {bucket: number of segments}.
A flush writes new segments, the changed bitmaps, drops the segments of buckets
fully delivered, and the directory, in one transaction: persisted membership
always names exactly positions that some persisted segment holds. A position
held in memory but not yet flushed is simply not a member after a restart, so
the dispatcher reads it again (it is unacknowledged) and tracks it again: the
last flush is the snapshot mark, and only the tail after it is re-read.

The index id is kept in a cursor property: a deleted and re-created
subscription gets a fresh, empty index, never its predecessor's (whose keys
are removed when the new one starts).

Why the metadata store rather than files under the data dir: the cursor and the
index then share one transactional, fsynced store, topic deletion removes both
with one prefix, and a segment write is one row, not a file plus a directory fsync.
"""

from __future__ import annotations

import heapq
import json
import logging
import sys
import uuid
from array import array
from collections.abc import Set as AbstractSet

from pyroaring import BitMap
from sortedcontainers import SortedSet

from magnetar.broker.delayed_delivery.tracker import Clock, DelayedDeliveryTracker, pack, wall_clock_ms
from magnetar.storage import ManagedCursor, MetadataStore, MetadataWriter, Position, layout

log = logging.getLogger(__name__)

INDEX_PROPERTY = "#magnetar.delayed.index"
"""Cursor property naming the subscription's current index (Pulsar keeps its bucket list there too)."""


def index_prefix(ledger_name: str, subscription: str) -> str:
    return f"{layout.ml_prefix(ledger_name)}delayed/{layout.escape(subscription)}/"


def _encode(triples: array) -> bytes:
    if sys.byteorder != "little":
        triples = array("q", triples)
        triples.byteswap()
    return triples.tobytes()


def _decode(raw: bytes) -> array:
    triples = array("q")
    triples.frombytes(raw)
    if sys.byteorder != "little":
        triples.byteswap()
    return triples


class BucketDelayedDeliveryTracker(DelayedDeliveryTracker):
    """Near buckets in memory, far ones as segments in the metadata store (PIP-195's idea)."""

    def __init__(
        self,
        store: MetadataStore,
        cursor: ManagedCursor,
        ledger_name: str,
        *,
        tick_ms: int,
        strict: bool,
        bucket_ms: int,
        flush_threshold: int,
        clock: Clock = wall_clock_ms,
    ) -> None:
        super().__init__(tick_ms, strict, clock)
        self._store = store
        self._cursor = cursor
        self._sub_prefix = index_prefix(ledger_name, cursor.name)
        self.bucket_ms = bucket_ms
        self.flush_threshold = flush_threshold
        self._segments: dict[int, int] = {}  # bucket -> persisted segment count
        self._buffers: dict[int, array] = {}  # bucket -> unflushed triples
        self._buffered = 0
        self._far: SortedSet = SortedSet()  # buckets not loaded yet
        self._loaded: dict[int, int] = {}  # loaded bucket -> its entries still in the heap
        self._dirty_ledgers: set[int] = set()
        self._drained: set[int] = set()
        self._prefix = self._open_index()

    # -- opening and recovery
    def _open_index(self) -> str:
        index_id = self._cursor.properties.get(INDEX_PROPERTY)
        if index_id is None:
            index_id = uuid.uuid4().hex
            self._cursor.set_property(INDEX_PROPERTY, index_id)
            self._cursor.flush()
        prefix = f"{self._sub_prefix}{index_id}/"
        self._drop_other_indexes(index_id)
        self._recover(prefix)
        return prefix

    def _drop_other_indexes(self, kept: str) -> None:
        """What an earlier index left (one a seek replaced, or a crash kept from going)."""
        sub = self._sub_prefix
        stale = {key[len(sub):].split("/", 1)[0] for key in self._store.list(sub)} - {kept}
        if stale:
            with self._store.transaction() as txn:
                for index_id in stale:
                    txn.delete_prefix(f"{sub}{index_id}/")

    def _recover(self, prefix: str) -> None:
        """Directory and membership only: segments stay in storage until their bucket is near."""
        raw = self._store.get(prefix + "buckets")
        self._segments = {int(b): n for b, n in json.loads(raw).items()} if raw else {}
        self._far.update(self._segments)
        for key in self._store.list(prefix + "members/"):
            data = self._store.get(key)
            if data:
                bits = BitMap.deserialize(data)
                ledger_id = int(key.rsplit("/", 1)[1])
                self._members[ledger_id] = bits
                self._count += len(bits)
                self.high_water = max(self.high_water or Position(ledger_id, 0), Position(ledger_id, bits.max()))
        if self._count:
            log.info("delayed index of %s: %d messages in %d buckets recovered",
                     self._cursor.name, self._count, len(self._segments))

    # -- indexing
    def _bucket(self, deliver_at: int) -> int:
        return deliver_at // self.bucket_ms

    def _index(self, key: int) -> None:
        deliver_at = key >> 64
        bucket = self._bucket(deliver_at)
        self._buffers.setdefault(bucket, array("q")).extend(
            (deliver_at, (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF))
        self._buffered += 1
        if bucket in self._loaded:
            self._loaded[bucket] += 1
            heapq.heappush(self._heap, key)
        else:
            self._far.add(bucket)
        if self._buffered >= self.flush_threshold:
            self.flush()

    def _mark_dirty(self, ledger_id: int) -> None:
        self._dirty_ledgers.add(ledger_id)

    # -- loading near buckets
    def _load_due(self, cutoff: int) -> None:
        while self._far and self._far[0] * self.bucket_ms <= cutoff:
            self._load(self._far.pop(0))

    def _load(self, bucket: int) -> None:
        keys: list[int] = []
        for seq in range(self._segments.get(bucket, 0)):
            raw = self._store.get(self._segment_key(bucket, seq))
            if raw is not None:
                self._collect(_decode(raw), keys)
        self._collect(self._buffers.get(bucket, array("q")), keys)
        self._loaded[bucket] = len(keys)
        self._heap.extend(keys)
        heapq.heapify(self._heap)

    def _collect(self, triples: array, keys: list[int]) -> None:
        """Keys of still-held positions (acked ones are dropped here, unread)."""
        for i in range(0, len(triples), 3):
            position = Position(triples[i + 1], triples[i + 2])
            if self.contains(position):
                keys.append(pack(triples[i], position))

    def _popped(self, deliver_at: int) -> None:
        bucket = self._bucket(deliver_at)
        left = self._loaded[bucket] - 1
        self._loaded[bucket] = left
        if left == 0:
            self._drained.add(bucket)

    def _after_pop(self) -> None:
        """A bucket wholly delivered and in the past takes no more adds: drop its segments."""
        horizon = self.clock() - self.early_ms
        done = {b for b in self._drained if self._loaded.get(b) == 0 and (b + 1) * self.bucket_ms <= horizon}
        if done:
            for bucket in done:
                del self._loaded[bucket]
            self._drained -= done
            self.flush(retired=done)

    def next_due_time(self) -> int | None:
        near = super().next_due_time()
        if self._far:
            far_start = self._far[0] * self.bucket_ms
            return far_start if near is None else min(near, far_start)
        return near

    # -- persistence
    def _segments_prefix(self, bucket: int) -> str:
        return f"{self._prefix}seg/{bucket:015d}/"

    def _segment_key(self, bucket: int, seq: int) -> str:
        return f"{self._segments_prefix(bucket)}{seq:08d}"

    def flush(self, retired: AbstractSet[int] = frozenset()) -> None:
        """Seal buffered entries as segments, persist changed membership, drop retired buckets."""
        with self._store.transaction() as txn:
            for bucket, triples in self._buffers.items():
                if bucket in retired:
                    continue
                seq = self._segments.get(bucket, 0)
                txn.put(self._segment_key(bucket, seq), _encode(triples))
                self._segments[bucket] = seq + 1
            for bucket in retired:
                self._segments.pop(bucket, None)
                txn.delete_prefix(self._segments_prefix(bucket))
            self._write_members(txn)
            txn.put(self._prefix + "buckets", json.dumps(self._segments).encode())
        self._buffers.clear()
        self._buffered = 0

    def _write_members(self, txn: MetadataWriter) -> None:
        for ledger_id in self._dirty_ledgers:
            key = f"{self._prefix}members/{ledger_id:020d}"
            bits = self._members.get(ledger_id)
            if bits:
                bits.run_optimize()
                txn.put(key, bits.serialize())
            else:
                txn.delete(key)
        self._dirty_ledgers.clear()

    def clear(self) -> None:
        """After a seek: a new, empty index; the old one's keys go."""
        super().clear()
        for state in (self._segments, self._buffers, self._loaded):
            state.clear()
        self._far.clear()
        self._dirty_ledgers.clear()
        self._drained.clear()
        self._buffered = 0
        self._cursor.remove_property(INDEX_PROPERTY)
        self._prefix = self._open_index()
