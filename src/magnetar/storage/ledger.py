"""One ledger: an append-only data file of checksummed records plus an index of their offsets.

Data file `<id>.log`: records `[u32 length][u32 crc32c(data)][data]`, big-endian.
Index file `<id>.idx`: one big-endian u64 file offset per entry.

The index is written only after the data it points to is durable, and is never fsynced per
append: it doubles as the durable high-water mark that a read-only process trusts, and on
open it is checked against the data file and rebuilt from it when it lags or is damaged.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import struct
import sys
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import crc32c

from magnetar.storage import faults
from magnetar.storage.errors import CorruptEntryError, ReadOnlyError, StorageClosedError, is_space_error
from magnetar.storage.file_pool import UNBOUNDED, FilePool

log = logging.getLogger(__name__)

HEADER = struct.Struct(">II")
INDEX_SLOT_BYTES = 8
_SCAN_CHUNK_BYTES = 4 * 1024 * 1024
_fdatasync = getattr(os, "fdatasync", os.fsync)
_IOV_MAX = 1024

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


def data_path(directory: Path, ledger_id: int) -> Path:
    return directory / f"{ledger_id}.log"


def index_path(directory: Path, ledger_id: int) -> Path:
    return directory / f"{ledger_id}.idx"


def fsync_dir(directory: Path) -> None:
    """A new or removed file is only durable once its directory entry is."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _pwritev_all(fd: int, buffers: list[bytes], offset: int) -> None:
    for start in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[start : start + _IOV_MAX]
        written = os.pwritev(fd, chunk, offset)
        expected = sum(map(len, chunk))
        if written < expected:  # rare short write: finish it the simple way
            _pwrite_all(fd, b"".join(chunk)[written:], offset + written)
        offset += expected


_write_records: faults.WriteRecords = faults.guard_writes(_pwritev_all) if faults.ACTIVE else _pwritev_all
"""The data file's write; a test switch can make it fail like a full disk (see faults)."""


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""


def _pack_offsets(offsets: Sequence[int]) -> bytes:
    return struct.pack(f">{len(offsets)}Q", *offsets)


def _unpack_offsets(raw: bytes) -> array:
    offsets = array("Q", raw[: len(raw) - len(raw) % INDEX_SLOT_BYTES])
    if sys.byteorder == "little":
        offsets.byteswap()
    return offsets


def _valid_index_prefix(offsets: array, first_offset: int, file_size: int) -> int:
    """How many leading index slots can be believed without reading the data file.

    Offsets must start where the known records end, grow by at least a header each and stay
    inside the file; a torn or stale index fails one of these and is cut at the first bad slot.
    """
    expected_min = first_offset
    for i, offset in enumerate(offsets):
        if (i == 0 and offset != first_offset) or offset < expected_min or offset + HEADER.size > file_size:
            return i
        expected_min = offset + HEADER.size
    return len(offsets)


def _record_end(fd: int, offset: int, file_size: int) -> int | None:
    """End of the whole, checksum-valid record at `offset`, or None if it is torn or corrupt."""
    header = os.pread(fd, HEADER.size, offset)
    if len(header) < HEADER.size:
        return None
    length, crc = HEADER.unpack(header)
    end = offset + HEADER.size + length
    if end > file_size:
        return None
    return end if crc32c.crc32c(os.pread(fd, length, offset + HEADER.size)) == crc else None


def _trusted_index(fd: int, indexed: array, first_offset: int, file_size: int) -> tuple[int, int]:
    """How many index slots point at whole records, and where the last of them ends.

    Only the last record is read back: the index is written after the data it covers, so if
    its last slot is good, the ones before it are too.
    """
    valid = _valid_index_prefix(indexed, first_offset, file_size)
    while valid:
        end = _record_end(fd, indexed[valid - 1], file_size)
        if end is not None:
            return valid, end
        valid -= 1
    return 0, first_offset


def _scan(fd: int, start: int, file_size: int, max_records: int | None) -> tuple[list[int], int]:
    """Offsets of the whole, checksum-valid records from `start` on, and where they end.

    Reads big chunks rather than one pread per record: a rebuild may cover a whole ledger.
    """
    offsets: list[int] = []
    pos = start
    buf = b""
    buf_start = start
    while pos + HEADER.size <= file_size and (max_records is None or len(offsets) < max_records):
        if pos + HEADER.size > buf_start + len(buf):
            buf, buf_start = os.pread(fd, _SCAN_CHUNK_BYTES, pos), pos
        length, crc = HEADER.unpack_from(buf, pos - buf_start)
        end = pos + HEADER.size + length
        if end > file_size:
            break
        if end > buf_start + len(buf):
            buf, buf_start = os.pread(fd, max(_SCAN_CHUNK_BYTES, end - pos), pos), pos
        body = memoryview(buf)[pos - buf_start + HEADER.size : end - buf_start]
        if crc32c.crc32c(body) != crc:
            break
        offsets.append(pos)
        pos = end
    return offsets, pos


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

    def __init__(self, directory: Path, ledger_id: int, *, writable: bool, pool: FilePool | None) -> None:
        self.ledger_id = ledger_id
        self._directory = directory
        self._offsets: array | None = array("Q")
        """Entry offsets while the ledger is written or tailed; None once it is closed and its
        index file complete: then the index file answers (see _slots_locked), so a closed
        ledger costs no memory per entry however many are open."""
        self._count = 0
        """Entries of a closed ledger (whose `_offsets` is None)."""
        self._end = 0
        self._writable = writable
        """The current ledger: its data file opens read-write, and it has an index to append to."""
        self._pool = pool if pool is not None else FilePool(UNBOUNDED)
        self._lock = threading.Lock()
        self._data_fd = -1
        self._index_fd = -1
        self._pins = 0
        self._closed = False

    @classmethod
    def create(cls, directory: Path, ledger_id: int, pool: FilePool | None = None) -> Ledger:
        ledger = cls(directory, ledger_id, writable=True, pool=pool)
        with ledger._closed_on_error():
            with ledger._lock:
                ledger._data_fd = ledger._open_file(data_path(directory, ledger_id), os.O_RDWR | os.O_CREAT | os.O_EXCL)
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
        indexed = _unpack_offsets(_read_from(index_path(self._directory, self.ledger_id), 0))
        valid, start = _trusted_index(data_fd, indexed, 0, file_size)
        tail, end = _scan(data_fd, start, file_size, None)
        offsets = indexed[:valid]
        offsets.extend(tail)
        if end < file_size:
            os.ftruncate(data_fd, end)
            _fdatasync(data_fd)
            log.warning("ledger %d: dropped %d bytes of torn or corrupt tail", self.ledger_id, file_size - end)
        self._offsets, self._end = offsets, end
        index_fd = self._index(os.O_CREAT)
        index_rebuilt = valid != len(indexed) or bool(tail)
        if index_rebuilt:
            _pwrite_all(index_fd, _pack_offsets(offsets), 0)
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
            indexed = _unpack_offsets(
                _read_from(index_path(self._directory, self.ledger_id), known * INDEX_SLOT_BYTES)
            )
            if entries is not None:
                del indexed[max(0, entries - known) :]
            valid, end = _trusted_index(data_fd, indexed, self._end, file_size)
            self._offsets.extend(indexed[:valid])
            if entries is not None and known + valid < entries:
                tail, end = _scan(data_fd, end, file_size, entries - known - valid)
                self._offsets.extend(tail)
            self._end = end
            if entries is not None and known + valid == entries:
                self._drop_offsets()  # closed, and its index file holds every slot

    # --- descriptors -------------------------------------------------------------------------

    def _data(self) -> int:
        """Lock held: the data file's descriptor, reopened if the pool closed it."""
        if self._data_fd < 0:
            flags = os.O_RDWR if self._writable else os.O_RDONLY
            self._data_fd = self._open_file(data_path(self._directory, self.ledger_id), flags)
        else:
            self._pool.touch(self)
        return self._data_fd

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
        offsets = self._offsets
        if offsets is None:
            with self._lock:
                return self._slots_locked(first, count)
        stop = first + count
        return offsets[first:stop], offsets[stop] if stop < len(offsets) else self._end

    @property
    def size(self) -> int:
        """Bytes of whole records in the data file, headers included."""
        return self._end

    def append(self, entries: Sequence[bytes], *, sync: bool) -> None:
        """Write a group of entries with one vectored write and at most one fsync, then index them.

        Per-entry work is done with map() and writev so that it runs in C: this is the
        sync thread's hot loop, and it competes with the appending thread for the GIL.
        """
        lengths = list(map(len, entries))
        headers = map(HEADER.pack, lengths, map(crc32c.crc32c, entries))
        buffers = [part for record in zip(headers, entries, strict=True) for part in record]
        offsets = list(itertools.accumulate((HEADER.size + length for length in lengths), initial=self._end))
        end = offsets.pop()
        data_fd, index_fd = self._pin_for_write()
        try:
            _write_records(data_fd, buffers, self._end)
            if sync:
                _fdatasync(data_fd)
            _pwrite_all(index_fd, _pack_offsets(offsets), len(self._offsets) * INDEX_SLOT_BYTES)
        except OSError as exc:
            if is_space_error(exc):
                self._cut_back(data_fd, index_fd)
            raise
        finally:
            self._unpin()
        self._end = end
        self._offsets.extend(offsets)

    def _cut_back(self, data_fd: int, index_fd: int) -> None:
        """Undo a write the disk had no room for: cut both files back to the last whole entry.

        Nothing past `_end` was reported durable, and leaving it would let a restart find
        whole records nobody acknowledged (or serve a torn one). Shrinking a file needs no
        free space; if even this fails the error propagates and the ledger stops for good.
        """
        os.ftruncate(data_fd, self._end)
        os.ftruncate(index_fd, len(self._offsets) * INDEX_SLOT_BYTES)
        _fdatasync(data_fd)
        log.warning("ledger %d: disk full, write undone back to entry %d", self.ledger_id, len(self._offsets))

    def entries_within(self, first: int, max_count: int, max_bytes: int) -> tuple[int, int]:
        """How many entries from `first` (at most max_count) fit in max_bytes of entry data,
        and their size: answered from the index, before reading anything."""
        starts, end = self._span(first, max_count)
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
        """Entries first..first+count-1 with a single pread, each checked against its crc.

        With `into` the entries are views of one buffer it gives, not copies: for a reader that
        is done with them soon (the Spark source), which saves a copy and, with an allocator
        that keeps its memory between reads, the page faults of fresh memory on every read
        (which cost more than the copy). A view keeps the whole buffer alive."""
        offsets = self._offsets
        lock = self._lock
        lock.acquire()  # not `with`: half the cost, on the path of every read that misses the cache
        try:
            fd = self._data_fd
            if fd < 0 or self._pool.last_used is not self:
                fd = self._data()
            if offsets is not None:
                after = first + count
                start = offsets[first]
                stop = offsets[after] if after < len(offsets) else self._end
            else:
                starts, stop = self._slots_locked(first, count)
                start = starts[0]
            buf = os.pread(fd, stop - start, start) if into is None else self._read_into(into, fd, start, stop)
        finally:
            lock.release()
        view = memoryview(buf)
        out: list[Any] = []
        pos = 0
        for entry_id in range(first, first + count):
            length, crc = HEADER.unpack_from(view, pos)
            data = view[pos + HEADER.size : pos + HEADER.size + length]
            if crc32c.crc32c(data) != crc:
                raise CorruptEntryError(f"ledger {self.ledger_id} entry {entry_id}: checksum mismatch")
            out.append(data if into is not None else bytes(data))
            pos += HEADER.size + length
        return out

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
        data_fd, index_fd = self._pin_for_write()
        try:
            _fdatasync(data_fd)
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


def remove_files(directory: Path, ledger_id: int) -> None:
    for path in (data_path(directory, ledger_id), index_path(directory, ledger_id)):
        path.unlink(missing_ok=True)
