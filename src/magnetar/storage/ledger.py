"""One ledger: an append-only data file of checksummed records plus an index of their offsets
(their layout: ledger_files).

The index is written only after the data it points to is durable (see write_index), and is
never fsynced per append: it doubles as the durable high-water mark that a read-only process
trusts, and on open it is checked against the data file and rebuilt from it when it lags or
is damaged.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import operator
import os
import struct
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from magnetar.storage import faults
from magnetar.storage.errors import CorruptEntryError, ReadOnlyError, StorageClosedError, is_space_error
from magnetar.storage.file_pool import UNBOUNDED, FilePool
from magnetar.storage.ledger_files import (
    HEADER,
    INDEX_SLOT_BYTES,
    IOV_MAX,
    data_path,
    fdatasync,
    fsync_dir,
    index_path,
    pack_offsets,
    pwrite_all,
    pwritev_all,
    read_from,
    scan_records,
    trusted_index,
    unpack_offsets,
)
from magnetar.wire.checksum import crc32c

log = logging.getLogger(__name__)

_write_records: faults.WriteRecords = faults.guard_writes(pwritev_all) if faults.ACTIVE else pwritev_all
"""The data file's write; a test switch can make it fail like a full disk (see faults)."""

#: Entries at least this big are read on their own, into a bytes object that is then the
#: entry, instead of being sliced out of one read of their range: slicing copied every byte
#: a second time (and these are what a dispatch pass moves most bytes of), and a view into
#: the range's buffer instead of a copy would keep that whole buffer alive for as long as
#: any one entry of it is held (a tiny entry pinning megabytes). Smaller entries still share
#: one pread: a syscall per entry would cost more than copying it.
_OWN_READ_BYTES = 64 * 1024
_Piece = tuple[int, int, bytes | memoryview, int | None]
"""What a range read under the lock: (first entry id, count, records, None) for a run of
small entries, (entry id, 1, data, crc) for a large one; checked once the lock is released."""

Allocator = Callable[[int], Any]
"""Gives a writable buffer of n bytes (a bytearray, pyarrow's `allocate_buffer`) for a read to
land in: the entries read are then views of it (memoryview), not copies."""


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening a ledger had to repair; the caller logs it and tests assert on it."""

    ledger_id: int
    entries: int
    dropped_bytes: int
    index_rebuilt: bool


class Ledger:
    """Files of one ledger, open for reading and (while it is the current ledger) appending.

    Only the sync thread appends; readers on other threads see an entry once `entries`
    counts it, which happens after its bytes are durable.

    Descriptors are opened on demand and counted in a FilePool, which may close them while
    the ledger is idle; the next read or append reopens them. `_lock` guards them: a read
    holds it across its pread (short, and it keeps eviction away), while an append or a seal
    only *pins* them under the lock and then writes and fsyncs without it, so that a reader
    never waits for an fsync. A sealed ledger, or one opened only to read, has no index
    descriptor at all.
    """

    def __init__(
        self, directory: Path, ledger_id: int, *, writable: bool, pool: FilePool | None, dsync: bool = False
    ) -> None:
        self.ledger_id = ledger_id
        self._directory = directory
        self._offsets: array | None = array("Q")
        """Entry offsets while the ledger is written or tailed; None once it is closed and its
        index file complete: then the index file answers (see _slots_locked), so a closed
        ledger costs no memory per entry however many are open."""
        self._count = 0
        """Entries of a closed ledger (whose `_offsets` is None)."""
        self._end = 0
        self._indexed = 0
        """Slots written to the index file; the ones past it are in `_offsets` only, until
        write_index()."""
        self._dsync = dsync
        """The data file is written with O_DSYNC: each write returns once durable, so an
        append is one system call, not a write and an fdatasync (each a round trip of the
        GIL for the sync thread, which a busy event loop can hold for milliseconds)."""
        self._writable = writable
        """The current ledger: its data file opens read-write, and it has an index to append to."""
        self._pool = pool if pool is not None else FilePool(UNBOUNDED)
        self._lock = threading.Lock()
        self._data_fd = -1
        self._index_fd = -1
        self._pins = 0
        self._closed = False

    @classmethod
    def create(cls, directory: Path, ledger_id: int, pool: FilePool | None = None, *, dsync: bool = False) -> Ledger:
        """A new, empty ledger to append to; `dsync` for one whose appends are all synced."""
        ledger = cls(directory, ledger_id, writable=True, pool=pool, dsync=dsync)
        with ledger._closed_on_error():
            with ledger._lock:
                flags = ledger._write_flags() | os.O_CREAT | os.O_EXCL
                ledger._data_fd = ledger._open_file(data_path(directory, ledger_id), flags)
                ledger._index(os.O_CREAT | os.O_EXCL)
            fsync_dir(directory)
        return ledger

    @classmethod
    def recover(cls, directory: Path, ledger_id: int, pool: FilePool | None = None) -> tuple[Ledger, RecoveryReport]:
        """Open a ledger a writer may have died in: cut a torn tail, rebuild the index.

        Everything up to the last whole, checksum-valid record is kept, including records
        written but never reported durable: they are whole, and keeping them is the same
        at-least-once outcome as a producer retrying.
        """
        ledger = cls(directory, ledger_id, writable=True, pool=pool)
        with ledger._closed_on_error(), ledger._lock:
            report = ledger._recover_locked()
        return ledger, report

    def _recover_locked(self) -> RecoveryReport:
        data_fd = self._data()
        file_size = os.fstat(data_fd).st_size
        indexed = unpack_offsets(read_from(index_path(self._directory, self.ledger_id), 0))
        valid, start = trusted_index(data_fd, indexed, 0, file_size)
        tail, end = scan_records(data_fd, start, file_size, None)
        offsets = indexed[:valid]
        offsets.extend(tail)
        if end < file_size:
            os.ftruncate(data_fd, end)
            fdatasync(data_fd)
            log.warning("ledger %d: dropped %d bytes of torn or corrupt tail", self.ledger_id, file_size - end)
        self._offsets, self._end, self._indexed = offsets, end, len(offsets)
        index_fd = self._index(os.O_CREAT)
        index_rebuilt = valid != len(indexed) or bool(tail)
        if index_rebuilt:
            pwrite_all(index_fd, pack_offsets(offsets), 0)
            os.ftruncate(index_fd, len(offsets) * INDEX_SLOT_BYTES)
        return RecoveryReport(self.ledger_id, len(offsets), file_size - end, index_rebuilt)

    @classmethod
    def open_read_only(
        cls, directory: Path, ledger_id: int, entries: int | None, pool: FilePool | None = None
    ) -> Ledger:
        """Open without writing anything, trusting only what is known durable.

        `entries` is the count recorded when the ledger was closed; for a ledger still being
        written (None) the index alone says which entries are durable.
        """
        ledger = cls(directory, ledger_id, writable=False, pool=pool)
        with ledger._closed_on_error():
            ledger.refresh(entries)
        return ledger

    @contextlib.contextmanager
    def _closed_on_error(self) -> Iterator[None]:
        """Opening failed half-way: close what was opened, since no caller will get this ledger."""
        try:
            yield
        except BaseException:
            self.close()
            raise

    def refresh(self, entries: int | None) -> None:
        """Read-only: pick up entries the writer made durable since the last look.

        Reads only the index slots past those already known, so polling a tailing ledger
        stays cheap.
        """
        with self._lock:
            data_fd = self._data()
            if self._offsets is None:
                return  # closed and complete: nothing more will come
            known = len(self._offsets)
            file_size = os.fstat(data_fd).st_size
            indexed = unpack_offsets(
                read_from(index_path(self._directory, self.ledger_id), known * INDEX_SLOT_BYTES)
            )
            if entries is not None:
                del indexed[max(0, entries - known) :]
            valid, end = trusted_index(data_fd, indexed, self._end, file_size)
            self._offsets.extend(indexed[:valid])
            if entries is not None and known + valid < entries:
                tail, end = scan_records(data_fd, end, file_size, entries - known - valid)
                self._offsets.extend(tail)
            self._end = end
            if entries is not None and known + valid == entries:
                self._drop_offsets()  # closed, and its index file holds every slot

    # --- descriptors -------------------------------------------------------------------------

    def _data(self) -> int:
        """Lock held: the data file's descriptor, reopened if the pool closed it."""
        if self._data_fd < 0:
            flags = self._write_flags() if self._writable else os.O_RDONLY
            self._data_fd = self._open_file(data_path(self._directory, self.ledger_id), flags)
        else:
            self._pool.touch(self)
        return self._data_fd

    def _write_flags(self) -> int:
        return os.O_RDWR | os.O_DSYNC if self._dsync else os.O_RDWR

    def _index(self, extra_flags: int = 0) -> int:
        """Lock held: the index file's descriptor, reopened read-write if the pool closed it.

        Index slots are written with pwrite at the offset their entry number gives, so a
        reopened descriptor needs no seek to carry on where the closed one stopped.
        """
        if self._index_fd < 0:
            path = index_path(self._directory, self.ledger_id)
            self._index_fd = self._open_file(path, os.O_RDWR | extra_flags)
        return self._index_fd

    def _open_file(self, path: Path, flags: int) -> int:
        """Lock held: open one file, counted in the pool (which makes room for it first).

        If the process is out of descriptors (connections may have taken them), the pool
        gives back every idle one and the open is tried once more.
        """
        if self._closed:
            raise StorageClosedError(f"ledger {self.ledger_id} is closed")
        self._pool.opened(self)
        try:
            try:
                return os.open(path, flags, 0o644)
            except OSError as exc:
                if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._pool.evict_idle():
                    raise
                return os.open(path, flags, 0o644)
        except BaseException:
            self._pool.closed(self)
            raise

    def _pin_for_write(self) -> tuple[int, int]:
        """Data and index descriptors, opened if need be and kept open (eviction skips a
        pinned ledger) until _unpin(), so that writes and fsyncs run without the lock."""
        with self._lock:
            if not self._writable:
                raise ReadOnlyError(f"ledger {self.ledger_id} is not open for appending")
            fds = self._data(), self._index()
            self._pins += 1
            return fds

    def _unpin(self) -> None:
        with self._lock:
            self._pins -= 1

    def release_files_if_idle(self) -> bool:
        """Pool, with its own lock held: close our files unless a thread is using them."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._pins:
                return False
            self._close_fds()
            return True
        finally:
            self._lock.release()

    def _close_fds(self) -> int:
        """Lock held: close whatever is open, without telling the pool; how many were open."""
        closed = 0
        for fd in (self._data_fd, self._index_fd):
            if fd >= 0:
                closed += 1
                try:
                    os.close(fd)
                except OSError as exc:  # the descriptor is released even when close reports an error
                    log.warning("ledger %d: closing a file failed: %s", self.ledger_id, exc)
        self._data_fd = self._index_fd = -1
        return closed

    # --- entries -----------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        offsets = self._offsets
        return len(offsets) if offsets is not None else self._count

    def _drop_offsets(self) -> None:
        """Lock held, the index file complete: answer offsets from it from now on."""
        assert self._offsets is not None
        self._count = len(self._offsets)
        self._offsets = None

    def _index_for_reading(self) -> int:
        """Lock held: a closed ledger's index descriptor, opened read-only if need be."""
        if self._index_fd < 0:
            self._index_fd = self._open_file(index_path(self._directory, self.ledger_id), os.O_RDONLY)
        return self._index_fd

    def _slots_locked(self, first: int, count: int) -> tuple[Sequence[int], int]:
        """Lock held, closed ledger: offsets of entries first..first+count-1 and the end of
        the last, read from the index file with one pread."""
        total = self._count
        wanted = min(count + 1, total - first)
        raw = os.pread(self._index_for_reading(), wanted * INDEX_SLOT_BYTES, first * INDEX_SLOT_BYTES)
        if len(raw) < wanted * INDEX_SLOT_BYTES:
            raise CorruptEntryError(f"ledger {self.ledger_id}: index file shorter than its {total} entries")
        slots = struct.unpack(f">{wanted}Q", raw)
        return slots[:count], slots[count] if first + count < total else self._end

    def _span(self, first: int, count: int) -> tuple[Sequence[int], int]:
        """Offsets of entries first..first+count-1 and where the last one ends."""
        if self._offsets is None:
            with self._lock:
                return self._span_locked(first, count)
        return self._span_locked(first, count)

    def _span_locked(self, first: int, count: int) -> tuple[Sequence[int], int]:
        """_span, the lock held if the ledger is closed (its index file answers then)."""
        offsets = self._offsets
        if offsets is None:
            return self._slots_locked(first, count)
        stop = first + count
        return offsets[first:stop], offsets[stop] if stop < len(offsets) else self._end

    @property
    def size(self) -> int:
        """Bytes of whole records in the data file, headers included."""
        return self._end

    def append(self, entries: Sequence[bytes], *, sync: bool) -> None:
        """Write a group of entries with one vectored write and at most one fsync; their index
        slots are written by the next write_index() (or seal()).

        Per-entry work is done with map() and writev so that it runs in C: this is the
        sync thread's hot loop, and it competes with the appending thread for the GIL.
        """
        lengths = list(map(len, entries))
        headers = map(HEADER.pack, lengths, map(crc32c, entries))
        buffers = [part for record in zip(headers, entries, strict=True) for part in record]
        offsets = list(itertools.accumulate((HEADER.size + length for length in lengths), initial=self._end))
        end = offsets.pop()
        if self._dsync and len(buffers) > IOV_MAX:
            # Every write to an O_DSYNC file waits for the disk: one copy of the group is
            # cheaper than a flush per IOV_MAX buffers.
            buffers = [b"".join(buffers)]
        data_fd, index_fd = self._pin_for_write()
        try:
            _write_records(data_fd, buffers, self._end)
            if sync and not self._dsync:
                fdatasync(data_fd)
        except OSError as exc:
            if is_space_error(exc):
                self._cut_back(data_fd, index_fd)
            raise
        finally:
            self._unpin()
        self._end = end
        self._offsets.extend(offsets)

    def write_index(self) -> None:
        """Write the index slots of the entries appended since the last call.

        Kept out of append() so that a failed index write (a full disk) does not fail appends
        that are durable: recovery rebuilds a lagging index from the checksummed data file,
        so the slots stay pending for the next call. The managed ledger writes them before it
        acknowledges the appends, for read-only readers, which trust the index alone.
        """
        offsets = self._offsets
        assert offsets is not None
        if self._indexed == len(offsets):
            return
        _data_fd, index_fd = self._pin_for_write()
        try:
            pwrite_all(index_fd, pack_offsets(offsets[self._indexed :]), self._indexed * INDEX_SLOT_BYTES)
        finally:
            self._unpin()
        self._indexed = len(offsets)

    def _cut_back(self, data_fd: int, index_fd: int) -> None:
        """Undo a write the disk had no room for: cut both files back to the last whole entry.

        Nothing past `_end` was reported durable, and leaving it would let a restart find
        whole records nobody acknowledged (or serve a torn one). Shrinking a file needs no
        free space; if even this fails the error propagates and the ledger stops for good.
        """
        os.ftruncate(data_fd, self._end)
        os.ftruncate(index_fd, self._indexed * INDEX_SLOT_BYTES)
        fdatasync(data_fd)
        log.debug("ledger %d: disk full, write undone back to entry %d", self.ledger_id, len(self._offsets))

    def entries_within(self, first: int, max_count: int, max_bytes: int) -> tuple[int, int]:
        """How many entries from `first` (at most max_count) fit in max_bytes of entry data,
        and their size: answered from the index, before reading anything."""
        starts, end = self._span(first, max_count)
        total = end - starts[0] - HEADER.size * len(starts)
        if total <= max_bytes:  # the common case, answered without a loop over the entries
            return max_count, total
        total = 0
        for i, (start, stop) in enumerate(zip(starts, [*starts[1:], end], strict=True)):
            size = stop - start - HEADER.size
            if total + size > max_bytes:
                return i, total
            total += size
        return max_count, total

    def entry_size(self, entry_id: int) -> int:
        starts, end = self._span(entry_id, 1)
        return end - starts[0] - HEADER.size

    def read(self, entry_id: int) -> bytes:
        return self.read_range(entry_id, 1)[0]

    @overload
    def read_range(self, first: int, count: int, into: None = None) -> list[bytes]: ...

    @overload
    def read_range(self, first: int, count: int, into: Allocator) -> list[memoryview]: ...

    def read_range(self, first: int, count: int, into: Allocator | None = None) -> list[bytes] | list[memoryview]:
        """Entries first..first+count-1, each checked against its crc (after the lock is
        released): small ones sliced out of one pread of the range, large ones read on their
        own (see _OWN_READ_BYTES).

        With `into`, the whole range is read into one buffer it gives and the entries are
        views of it, not copies: for a reader that is done with them soon (the Spark source),
        which saves a copy and, with an allocator that keeps its memory between reads, the
        page faults of fresh memory on every read (which cost more than the copy). A view
        keeps the whole buffer alive."""
        lock = self._lock
        lock.acquire()  # not `with`: half the cost, on the path of every read that misses the cache
        try:
            fd = self._data_fd
            if fd < 0 or self._pool.last_used is not self:
                fd = self._data()
            starts, stop = self._span_locked(first, count)
            start = starts[0]
            if into is not None:
                pieces = [(first, count, self._read_into(into, fd, start, stop), None)]
            elif stop - start < _OWN_READ_BYTES:  # no entry can be large
                pieces = [(first, count, os.pread(fd, stop - start, start), None)]
            else:
                pieces = self._read_apart(fd, first, starts, stop)
        finally:
            lock.release()
        out: list[Any] = []
        for entry_id, n, buf, crc in pieces:
            if crc is None:
                self._split(buf, entry_id, n, out, views=into is not None)
            else:
                self._check(entry_id, buf, crc)
                out.append(buf)
        return out

    def _read_apart(self, fd: int, first: int, starts: Sequence[int], stop: int) -> list[_Piece]:
        """Lock held: a range that may hold large entries. Each large one is read with a
        pread of its header and one of its data, which is then the entry as it is; the runs
        of small ones between them with one pread each."""
        ends = [*starts[1:], stop]
        if max(map(operator.sub, ends, starts)) - HEADER.size < _OWN_READ_BYTES:  # in C: no per-entry Python
            return [(first, len(starts), os.pread(fd, stop - starts[0], starts[0]), None)]
        pieces: list[_Piece] = []
        run = 0
        for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
            length = end - start - HEADER.size
            if length < _OWN_READ_BYTES:
                continue
            if run < i:
                pieces.append((first + run, i - run, os.pread(fd, start - starts[run], starts[run]), None))
            stored_length, crc = HEADER.unpack(os.pread(fd, HEADER.size, start))
            data = os.pread(fd, length, start + HEADER.size)
            if stored_length != length or len(data) != length:
                raise CorruptEntryError(f"ledger {self.ledger_id} entry {first + i}: record disagrees with the index")
            pieces.append((first + i, 1, data, crc))
            run = i + 1
        if run < len(starts):
            pieces.append((first + run, len(starts) - run, os.pread(fd, stop - starts[run], starts[run]), None))
        return pieces

    def _split(self, buf: bytes | memoryview, first: int, count: int, out: list[Any], *, views: bool) -> None:
        """Append the `count` entries whose records `buf` holds, from entry `first` on: as
        bytes of their own, or with `views` as views of `buf`."""
        view = memoryview(buf)
        pos = 0
        for entry_id in range(first, first + count):
            length, crc = HEADER.unpack_from(view, pos)
            data = view[pos + HEADER.size : pos + HEADER.size + length]
            if not views:
                data = bytes(data)
            if crc32c(data) != crc:  # not _check(): a call per small entry shows
                self._corrupt(entry_id)
            out.append(data)
            pos += HEADER.size + length

    def _check(self, entry_id: int, data: bytes, crc: int) -> None:
        if crc32c(data) != crc:
            self._corrupt(entry_id)

    def _corrupt(self, entry_id: int) -> None:
        raise CorruptEntryError(f"ledger {self.ledger_id} entry {entry_id}: checksum mismatch")

    def _read_into(self, into: Allocator, fd: int, start: int, stop: int) -> memoryview:
        buf = memoryview(into(stop - start))
        got = os.preadv(fd, [buf], start)
        if got != len(buf):
            raise CorruptEntryError(f"ledger {self.ledger_id}: {got} bytes at offset {start}, expected {len(buf)}")
        return buf

    def seal(self) -> None:
        """Make data and index durable and stop appending: the ledger is closed for good.

        Files the pool closed since the last append are reopened to be fsynced: their dirty
        pages belong to the file, not to the descriptor that wrote them.
        """
        self.write_index()
        data_fd, index_fd = self._pin_for_write()
        try:
            fdatasync(data_fd)
            os.fsync(index_fd)
        finally:
            self._unpin()
        with self._lock:
            self._writable = False
            if self._index_fd >= 0:
                os.close(self._index_fd)
                self._index_fd = -1
                self._pool.closed(self)
            self._drop_offsets()

    def close(self) -> None:
        """Close the files for good: a later read raises StorageClosedError."""
        with self._lock:
            self._closed = True
            self._pool.closed(self, self._close_fds())
