"""The files of one ledger on disk: their names, the record and index formats, and how to
read them back, trusting only what checks out (a crash may have torn either file).

Data file `<id>.log`: records `[u32 length][u32 crc32c(data)][data]`, big-endian.
Index file `<id>.idx`: one big-endian u64 file offset per entry.

Kept apart from `Ledger`, which owns the descriptors, the locking and the in-memory state:
these are the byte layouts and the pure reads and writes over a descriptor they need.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from collections.abc import Sequence
from pathlib import Path

from magnetar.wire.checksum import crc32c

HEADER = struct.Struct(">II")
INDEX_SLOT_BYTES = 8
_SCAN_CHUNK_BYTES = 4 * 1024 * 1024
fdatasync = getattr(os, "fdatasync", os.fsync)
IOV_MAX = 1024
"""Buffers one pwritev takes (Linux's limit)."""


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


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def pwritev_all(fd: int, buffers: list[bytes], offset: int) -> None:
    for start in range(0, len(buffers), IOV_MAX):
        chunk = buffers[start : start + IOV_MAX]
        written = os.pwritev(fd, chunk, offset)
        expected = sum(map(len, chunk))
        if written < expected:  # rare short write: finish it the simple way
            pwrite_all(fd, b"".join(chunk)[written:], offset + written)
        offset += expected


def read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""


def pack_offsets(offsets: Sequence[int]) -> bytes:
    return struct.pack(f">{len(offsets)}Q", *offsets)


def unpack_offsets(raw: bytes) -> array:
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
    return end if crc32c(os.pread(fd, length, offset + HEADER.size)) == crc else None


def trusted_index(fd: int, indexed: array, first_offset: int, file_size: int) -> tuple[int, int]:
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


def scan_records(fd: int, start: int, file_size: int, max_records: int | None) -> tuple[list[int], int]:
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
        if crc32c(body) != crc:
            break
        offsets.append(pos)
        pos = end
    return offsets, pos


def remove_files(directory: Path, ledger_id: int) -> None:
    for path in (data_path(directory, ledger_id), index_path(directory, ledger_id)):
        path.unlink(missing_ok=True)
