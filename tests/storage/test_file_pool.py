"""The factory's file pool: ledger files stay within max_open_files however many topics
and ledgers there are, and closing them under a reader or writer never loses or mixes data."""

import os
import random
import struct
import threading
from pathlib import Path

import pytest
from polling import wait_for

from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory, Position, layout
from magnetar.storage.file_pool import FilePool
from magnetar.storage.ledger_files import HEADER

LIMIT = 8
TOPICS = [f"persistent://public/default/pool-{i}" for i in range(6)]


def payload(topic: int, i: int) -> bytes:
    """Distinct per topic and entry, so bytes read from the wrong file can never pass."""
    size = random.Random(topic * 100_003 + i).choice([0, 1, 50, 700, 5000])
    return (f"{topic}:{i};".encode() * (size // 4 + 1))[:size] + i.to_bytes(4, "big") + topic.to_bytes(2, "big")


def ledger_fds(data_dir: Path) -> list[str]:
    """Files under the data dir this process holds open, the metadata store and LOCK aside."""
    ledgers = str(data_dir / "managed-ledgers")
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            continue
        if target.startswith(ledgers):
            targets.append(target)
    return targets


def index_of(data: bytes) -> bytes:
    """The index a data file should have: the big-endian u64 offset of each record."""
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += HEADER.size + HEADER.unpack_from(data, pos)[0]
    return struct.pack(f">{len(offsets)}Q", *offsets)


def small_pool_factory(open_factory, *, read_only: bool = False, **overrides) -> ManagedLedgerFactory:
    # No entry cache: every read goes to the files.
    settings = {"max_open_files": LIMIT, "max_entries_per_ledger": 3, "cache_size_bytes": 0} | overrides
    return open_factory(ManagedLedgerConfig(**settings), read_only=read_only)


def check_bounded(factory: ManagedLedgerFactory) -> None:
    open_now = ledger_fds(factory.data_dir)
    assert len(open_now) <= LIMIT, open_now
    assert factory.file_pool.open_files == len(open_now)  # the pool counts exactly what is open


def test_many_topics_and_ledgers_stay_within_the_limit(open_factory):
    factory = small_pool_factory(open_factory)
    mls = [factory.open(name) for name in TOPICS]
    positions: dict[int, list[Position]] = {t: [] for t in range(len(mls))}
    for i in range(40):  # 14 ledgers per topic, written in turn
        for t, ml in enumerate(mls):
            positions[t].append(ml.append_sync(payload(t, i)))
            check_bounded(factory)
    assert sum(len(ml.ledgers) for ml in mls) == len(TOPICS) * 14
    for t, ml in enumerate(mls):
        got = ml.read_entries(ml.first_position, 1000)
        assert [data for _, data in got] == [payload(t, i) for i in range(40)]
        assert [p for p, _ in got] == positions[t]
        check_bounded(factory)
    rng = random.Random(5)
    for _ in range(500):
        t, i = rng.randrange(len(mls)), rng.randrange(40)
        assert mls[t].read_entry(positions[t][i]) == payload(t, i)
        check_bounded(factory)


def test_sealed_ledgers_open_their_index_only_to_be_read(open_factory):
    """A closed ledger's offsets are read from its index file, not kept in memory: the
    index is opened (read-only, counted in the pool) by the first read, not by sealing."""
    factory = small_pool_factory(open_factory, max_open_files=100)
    ml = factory.open(TOPICS[0])
    for i in range(10):
        ml.append_sync(payload(0, i))
    writing = ml.ledgers[-1].ledger_id
    open_now = ledger_fds(factory.data_dir)
    assert [Path(p).name for p in open_now if p.endswith(".idx")] == [f"{writing}.idx"]
    assert [data for _, data in ml.read_entries(ml.first_position, 100)] == [payload(0, i) for i in range(10)]
    open_now = ledger_fds(factory.data_dir)
    assert len([p for p in open_now if p.endswith(".idx")]) == len(ml.ledgers)
    assert len([p for p in open_now if p.endswith(".log")]) == len(ml.ledgers)
    check_bounded(factory)


def test_appends_after_eviction_reopen_the_files_and_survive_reopening(open_factory, tmp_path):
    factory = small_pool_factory(open_factory, max_entries_per_ledger=1000)
    target = factory.open(TOPICS[0])
    target.append_sync(payload(0, 0))
    assert len(ledger_fds(factory.data_dir)) == 2  # data and index of the ledger being written
    for i in range(1, 30):
        # The commit still holds the files while it writes the index, after the acknowledgement.
        assert wait_for(lambda: factory.file_pool.evict_idle() > 0, interval=0.001)
        assert ledger_fds(factory.data_dir) == []
        target.append_sync(payload(0, i))  # reopens data (read-write) and index, writes at the end
    factory.close()
    # Opening would quietly rebuild a wrong index from the data file: check its bytes first.
    for log_file in (tmp_path / "data" / "managed-ledgers").glob("*/*.log"):
        assert log_file.with_suffix(".idx").read_bytes() == index_of(log_file.read_bytes())
    with ManagedLedgerFactory(tmp_path / "data") as reopened:
        ml = reopened.open(TOPICS[0])
        assert [data for _, data in ml.read_entries(ml.first_position, 100)] == [payload(0, i) for i in range(30)]


def test_two_writing_ledgers_in_a_pool_of_two_evict_each_other(open_factory):
    factory = small_pool_factory(open_factory, max_open_files=2, max_entries_per_ledger=1000)
    first, second = factory.open(TOPICS[0]), factory.open(TOPICS[1])
    for i in range(20):
        first.append_sync(payload(0, i))
        assert {Path(p).parent.name for p in ledger_fds(factory.data_dir)} == {layout.directory_name(TOPICS[0])}
        second.append_sync(payload(1, i))
        assert {Path(p).parent.name for p in ledger_fds(factory.data_dir)} == {layout.directory_name(TOPICS[1])}
    for t, ml in enumerate((first, second)):
        assert [data for _, data in ml.read_entries(ml.first_position, 100)] == [payload(t, i) for i in range(20)]


def test_topics_loaded_after_a_restart_stay_within_the_limit(open_factory, tmp_path):
    factory = small_pool_factory(open_factory)
    for t, name in enumerate(TOPICS * 3):
        ml = factory.open(f"{name}-{t}")
        for i in range(5):
            ml.append_sync(payload(t, i))
    factory.close()
    reopened = small_pool_factory(open_factory)
    for t, name in enumerate(TOPICS * 3):
        ml = reopened.open(f"{name}-{t}")
        assert ml.read_entry(ml.last_confirmed_position) == payload(t, 4)  # what the broker does on loading
        check_bounded(reopened)
    assert len(reopened.file_pool) <= LIMIT


def test_read_only_factory_uses_a_pool_too(open_factory):
    writer = small_pool_factory(open_factory, max_open_files=100)
    for t, name in enumerate(TOPICS):
        ml = writer.open(name)
        for i in range(12):
            ml.append_sync(payload(t, i))
    writer_fds = len(ledger_fds(writer.data_dir))
    reader = small_pool_factory(open_factory, read_only=True)
    for t, name in enumerate(TOPICS):
        ml = reader.open(name)
        assert wait_for(lambda ml=ml: ml.refresh() or ml.number_of_entries() == 12, interval=0.001)  # last indexed
        assert [data for _, data in ml.read_entries(ml.first_position, 100)] == [payload(t, i) for i in range(12)]
        assert reader.file_pool.open_files <= LIMIT
    assert len(ledger_fds(writer.data_dir)) <= writer_fds + LIMIT


def test_concurrent_readers_never_see_wrong_data_while_files_are_evicted(open_factory):
    """Two readers on random positions of several topics, a writer appending to all of them,
    and a pool too small for the topics: descriptors are closed and reopened all the time,
    and a read through a descriptor number reused for another file would return another
    topic's bytes, which payload() tells apart."""
    factory = small_pool_factory(open_factory, max_open_files=4, max_entries_per_ledger=5, sync_data=False)
    mls = [factory.open(name) for name in TOPICS]
    positions: list[list[Position]] = [[] for _ in mls]
    for t, ml in enumerate(mls):
        positions[t].append(ml.append_sync(payload(t, 0)))
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0, 0]

    def write() -> None:
        i = 1
        while not stop.is_set():
            for t, ml in enumerate(mls):
                positions[t].append(ml.append_sync(payload(t, i)))
            i += 1

    def read(reader: int) -> None:
        rng = random.Random(reader)
        while not stop.is_set():
            t = rng.randrange(len(mls))
            known = len(positions[t])
            i = rng.randrange(known)
            if rng.random() < 0.5:
                assert mls[t].read_entry(positions[t][i]) == payload(t, i)
            else:
                got = mls[t].read_entries(positions[t][i], 7)
                assert [data for _, data in got] == [payload(t, j) for j in range(i, i + len(got))]
            reads[reader] += 1

    def guarded(target, *args) -> None:
        try:
            target(*args)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=guarded, args=(write,))]
    threads += [threading.Thread(target=guarded, args=(read, r)) for r in range(2)]
    for thread in threads:
        thread.start()
    # enough reads and rollovers to have evicted and reopened files many times over
    wait_for(lambda: stop.is_set() or (min(reads) > 100 and len(positions[0]) > 20), timeout=120)
    stop.set()
    for thread in threads:
        thread.join(10)
    assert not errors, errors[0]
    assert min(reads) > 100 and len(positions[0]) > 20
    # Busy members may push the pool over its limit for a moment, never for good.
    assert factory.file_pool.open_files == len(ledger_fds(factory.data_dir))
    for t, ml in enumerate(mls):
        assert [data for _, data in ml.read_entries(ml.first_position, 10**6)] == [
            payload(t, i) for i in range(len(positions[t]))
        ]
    check_bounded(factory)


def test_max_open_files_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="max_open_files"):
        ManagedLedgerFactory(tmp_path / "data", ManagedLedgerConfig(max_open_files=0))


class FakeMember:
    """A pool member whose files close unless it is marked busy."""

    def __init__(self, busy: bool = False) -> None:
        self.busy = busy
        self.released = 0

    def release_files_if_idle(self) -> bool:
        if self.busy:
            return False
        self.released += 1
        return True


def test_pool_evicts_least_recently_used_first_and_skips_busy_members():
    pool = FilePool(3)
    a, b, c, d = FakeMember(), FakeMember(busy=True), FakeMember(), FakeMember()
    for member in (a, b, c):
        pool.opened(member)
    pool.touch(a)  # order now b, c, a
    pool.opened(d)  # over the limit: b is busy, so c goes
    assert (a.released, b.released, c.released) == (0, 0, 1)
    assert pool.open_files == 3 and len(pool) == 3
    pool.opened(d)  # d's second file: a is the least recently used idle member
    assert a.released == 1
    assert pool.open_files == 3
    pool.closed(d, 2)
    assert pool.open_files == 1  # b alone, still busy
    assert pool.evict_idle() == 0
    b.busy = False
    assert pool.evict_idle() == 1 and pool.open_files == 0 and len(pool) == 0


def test_pool_over_its_limit_only_while_every_other_member_is_busy():
    pool = FilePool(2)
    busy = [FakeMember(busy=True), FakeMember(busy=True)]
    for member in busy:
        pool.opened(member)
    newcomer = FakeMember()
    pool.opened(newcomer)
    assert pool.open_files == 3  # nothing could be closed at once, and nothing waited
    busy[0].busy = False
    pool.opened(newcomer)
    assert busy[0].released == 1 and pool.open_files == 3
