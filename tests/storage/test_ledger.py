import os
import struct

import crc32c
import pytest

from magnetar.storage.errors import CorruptEntryError
from magnetar.storage.ledger import Ledger
from magnetar.storage.ledger_files import HEADER, data_path, index_path

ENTRIES = [b"a", b"", b"x" * 5000, bytes(range(256))]


def test_append_then_read_back_byte_for_byte(tmp_path):
    ledger = Ledger.create(tmp_path, 1)
    ledger.append(ENTRIES[:2], sync=True)
    ledger.append(ENTRIES[2:], sync=False)
    assert ledger.entries == len(ENTRIES)
    assert [ledger.read(i) for i in range(len(ENTRIES))] == ENTRIES
    assert ledger.read_range(1, 3) == ENTRIES[1:]
    assert ledger.entry_size(2) == 5000
    assert ledger.size == sum(HEADER.size + len(e) for e in ENTRIES)
    ledger.close()


def test_record_format_is_length_crc_data_big_endian(tmp_path):
    ledger = Ledger.create(tmp_path, 3)
    ledger.append([b"hello"], sync=True)
    ledger.seal()
    ledger.close()
    raw = data_path(tmp_path, 3).read_bytes()
    assert raw == struct.pack(">II", 5, crc32c.crc32c(b"hello")) + b"hello"
    assert index_path(tmp_path, 3).read_bytes() == struct.pack(">Q", 0)


def make(tmp_path, entries=ENTRIES):
    ledger = Ledger.create(tmp_path, 1)
    ledger.append(entries, sync=True)
    ledger.seal()
    ledger.close()


@pytest.mark.parametrize(
    "garbage",
    [b"\x00\x00", struct.pack(">II", 100, 0) + b"partial", struct.pack(">II", 3, 12345) + b"bad", b"\xff" * 64],
)
def test_torn_tail_is_truncated_and_reported(tmp_path, garbage):
    make(tmp_path)
    path = data_path(tmp_path, 1)
    good_size = path.stat().st_size
    with path.open("ab") as f:
        f.write(garbage)
    ledger, report = Ledger.recover(tmp_path, 1)
    assert report.dropped_bytes == len(garbage)
    assert report.entries == len(ENTRIES)
    assert path.stat().st_size == good_size
    assert [ledger.read(i) for i in range(ledger.entries)] == ENTRIES
    ledger.close()


def test_clean_ledger_recovers_without_repairs(tmp_path):
    make(tmp_path)
    ledger, report = Ledger.recover(tmp_path, 1)
    assert (report.dropped_bytes, report.index_rebuilt, report.entries) == (0, False, len(ENTRIES))
    ledger.close()


@pytest.mark.parametrize("damage", ["missing", "short", "torn_slot", "garbage"])
def test_index_is_rebuilt_from_data(tmp_path, damage):
    make(tmp_path)
    idx = index_path(tmp_path, 1)
    raw = idx.read_bytes()
    if damage == "missing":
        idx.unlink()
    elif damage == "short":
        idx.write_bytes(raw[:8])
    elif damage == "torn_slot":
        idx.write_bytes(raw[:-3])
    else:
        idx.write_bytes(raw[:8] + b"\xff" * 24)
    ledger, report = Ledger.recover(tmp_path, 1)
    assert report.index_rebuilt
    assert report.dropped_bytes == 0
    assert idx.read_bytes() == raw
    assert [ledger.read(i) for i in range(ledger.entries)] == ENTRIES
    ledger.close()


def test_corrupt_entry_detected_on_read(tmp_path):
    make(tmp_path)
    path = data_path(tmp_path, 1)
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, b"Z", HEADER.size)  # first byte of entry 0
    os.close(fd)
    ledger = Ledger.open_read_only(tmp_path, 1, len(ENTRIES))
    with pytest.raises(CorruptEntryError):
        ledger.read(0)
    assert ledger.read(2) == ENTRIES[2]
    ledger.close()


def test_read_only_sees_only_indexed_entries_and_refreshes(tmp_path):
    writer = Ledger.create(tmp_path, 1)
    writer.append([b"one", b"two"], sync=True)
    reader = Ledger.open_read_only(tmp_path, 1, None)
    assert reader.entries == 0, "durable, but not indexed yet"
    writer.write_index()
    reader.refresh(None)
    assert reader.entries == 2
    # Bytes written past the index (not yet reported durable) are invisible.
    with data_path(tmp_path, 1).open("ab") as f:
        f.write(HEADER.pack(5, crc32c.crc32c(b"three")) + b"three")
    reader.refresh(None)
    assert reader.entries == 2
    writer.close()
    writer2, _ = Ledger.recover(tmp_path, 1)
    writer2.append([b"four"], sync=True)
    writer2.write_index()
    reader.refresh(None)
    assert reader.entries == 4
    assert reader.read_range(0, 4) == [b"one", b"two", b"three", b"four"]
    writer2.close()
    reader.close()


def test_read_only_closed_ledger_scans_past_a_short_index(tmp_path):
    make(tmp_path)
    index_path(tmp_path, 1).write_bytes(b"")
    reader = Ledger.open_read_only(tmp_path, 1, len(ENTRIES))
    assert reader.read_range(0, len(ENTRIES)) == ENTRIES
    reader.close()


def answers(ledger: Ledger) -> tuple:
    """Everything a reader asks of a ledger's offsets."""
    n = ledger.entries
    return (
        n,
        ledger.size,
        [ledger.read(i) for i in range(n)],
        [ledger.read_range(i, n - i) for i in range(n)],
        [ledger.entry_size(i) for i in range(n)],
        [ledger.entries_within(i, n - i, budget) for i in range(n) for budget in (0, 1, 5000, 5008, 10**6)],
    )


def test_a_closed_ledger_answers_from_its_index_file_not_memory(tmp_path):
    writer = Ledger.create(tmp_path, 1)
    writer.append(ENTRIES[:3], sync=True)
    writer.append(ENTRIES[3:], sync=True)
    while_written = answers(writer)
    writer.seal()
    assert writer._offsets is None  # no 8 bytes per entry kept for a closed ledger
    assert answers(writer) == while_written
    reader = Ledger.open_read_only(tmp_path, 1, len(ENTRIES))
    assert reader._offsets is None
    assert answers(reader) == while_written
    writer.close()
    reader.close()


def test_a_closed_ledger_whose_index_is_short_keeps_its_offsets(tmp_path):
    make(tmp_path)
    index_path(tmp_path, 1).write_bytes(index_path(tmp_path, 1).read_bytes()[:8])
    reader = Ledger.open_read_only(tmp_path, 1, len(ENTRIES))
    assert reader._offsets is not None  # the index cannot answer for the scanned entries
    assert reader.read_range(0, len(ENTRIES)) == ENTRIES
    reader.close()


# Entries of 64 KiB and more are read on their own (two preads) rather than sliced out of one
# read of their range; the runs of small entries around them still share a pread.
BIG = bytes(range(256)) * 256  # 64 KiB
MIXED = [b"s1", BIG, b"s2", b"s3", BIG + b"!", BIG * 2, b"", b"s4"]


def test_a_range_mixing_large_and_small_entries_reads_back_byte_for_byte(tmp_path):
    writer = Ledger.create(tmp_path, 1)
    writer.append(MIXED, sync=True)
    n = len(MIXED)
    while_written = [writer.read_range(i, count) for i in range(n) for count in range(1, n - i + 1)]
    assert while_written == [MIXED[i : i + count] for i in range(n) for count in range(1, n - i + 1)]
    assert all(type(entry) is bytes for entry in writer.read_range(0, n))
    writer.seal()  # offsets now come from the index file
    assert [writer.read_range(i, n - i) for i in range(n)] == [MIXED[i:] for i in range(n)]
    writer.close()


@pytest.mark.parametrize("entry_id", [1, 3, 5])
def test_corruption_is_detected_in_a_large_entry_and_in_the_small_runs_around_it(tmp_path, entry_id):
    make(tmp_path, MIXED)
    ledger = Ledger.open_read_only(tmp_path, 1, len(MIXED))
    offset = ledger._span(entry_id, 1)[0][0] + HEADER.size + len(MIXED[entry_id]) - 1  # its last byte
    ledger.close()
    fd = os.open(data_path(tmp_path, 1), os.O_RDWR)
    os.pwrite(fd, b"Z", offset)
    os.close(fd)
    ledger = Ledger.open_read_only(tmp_path, 1, len(MIXED))
    with pytest.raises(CorruptEntryError, match=f"entry {entry_id}: checksum"):
        ledger.read_range(0, len(MIXED))
    assert ledger.read_range(entry_id + 1, len(MIXED) - entry_id - 1) == MIXED[entry_id + 1 :]
    ledger.close()


def test_a_large_record_whose_header_disagrees_with_the_index_is_corrupt(tmp_path):
    make(tmp_path, MIXED)
    ledger = Ledger.open_read_only(tmp_path, 1, len(MIXED))
    offset = ledger._span(1, 1)[0][0]
    ledger.close()
    fd = os.open(data_path(tmp_path, 1), os.O_RDWR)
    os.pwrite(fd, HEADER.pack(len(BIG) - 1, crc32c.crc32c(BIG[:-1])), offset)
    os.close(fd)
    ledger = Ledger.open_read_only(tmp_path, 1, len(MIXED))
    with pytest.raises(CorruptEntryError, match="entry 1: record disagrees with the index"):
        ledger.read_range(0, 3)
    ledger.close()


def test_a_read_into_a_given_buffer_gives_views_of_it_checked_as_copies_are(tmp_path):
    """`into` is for readers that are done with entries soon (the Spark source): one buffer
    per read, entries as views of it, every crc checked all the same."""
    make(tmp_path)
    ledger = Ledger.open_read_only(tmp_path, 1, len(ENTRIES))
    buffers = []

    def into(size: int) -> bytearray:
        buffers.append(bytearray(size))
        return buffers[-1]

    views = ledger.read_range(0, len(ENTRIES), into)
    assert [bytes(v) for v in views] == ENTRIES
    assert len(buffers) == 1 and all(v.obj is buffers[0] for v in views)
    fd = os.open(data_path(tmp_path, 1), os.O_RDWR)
    os.pwrite(fd, b"Z", HEADER.size)  # first byte of entry 0
    os.close(fd)
    with pytest.raises(CorruptEntryError, match="entry 0: checksum mismatch"):
        ledger.read_range(0, 2, into)
    ledger.close()


def test_a_read_into_a_buffer_that_the_file_cannot_fill_is_an_error_not_garbage(tmp_path):
    make(tmp_path)
    ledger = Ledger.open_read_only(tmp_path, 1, len(ENTRIES))
    os.truncate(data_path(tmp_path, 1), HEADER.size * 3 + 1)  # entries 0 and 1, then a cut
    with pytest.raises(CorruptEntryError, match="expected"):
        ledger.read_range(0, len(ENTRIES), bytearray)
    ledger.close()
