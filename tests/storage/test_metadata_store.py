import threading

import pytest
from write_holder import write_held_open

from magnetar.storage.errors import ReadOnlyError, StorageClosedError
from magnetar.storage.metadata_store import SqliteMetadataStore, bump_counter


@pytest.fixture
def store(tmp_path):
    s = SqliteMetadataStore(tmp_path / "metadata.db")
    yield s
    s.close()


def test_put_get_delete(store):
    assert store.get("a/b") is None
    store.put("a/b", b"1")
    assert store.get("a/b") == b"1"
    store.put("a/b", b"2")
    assert store.get("a/b") == b"2"
    store.delete("a/b")
    assert store.get("a/b") is None


def test_list_is_a_sorted_prefix_scan(store):
    for key in ["t/x/2", "t/x/1", "t/y", "t0", "u/x"]:
        store.put(key, b"")
    assert store.list("t/") == ["t/x/1", "t/x/2", "t/y"]
    assert store.list("t/x/") == ["t/x/1", "t/x/2"]
    assert store.list("") == ["t/x/1", "t/x/2", "t/y", "t0", "u/x"]
    assert store.list("v") == []


def test_delete_prefix_takes_the_keys_under_it_and_nothing_beside(store):
    for key in ["t/x/2", "t/x/1", "t/x", "t/xy/1", "t/y", "t0", "s/x/1"]:
        store.put(key, b"")
    store.delete_prefix("t/x/")
    assert store.list("") == ["s/x/1", "t/x", "t/xy/1", "t/y", "t0"]
    store.delete_prefix("t/")
    assert store.list("") == ["s/x/1", "t0"]
    store.delete_prefix("nothing/")  # no key: nothing happens
    with pytest.raises(ValueError, match="every key"):
        store.delete_prefix("")
    assert store.list("") == ["s/x/1", "t0"]


def test_delete_prefix_in_a_transaction_goes_with_it(store):
    for key in ["t/1", "t/2", "name"]:
        store.put(key, b"")
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.delete("name")
        txn.delete_prefix("t/")
        raise RuntimeError("abort")
    assert store.list("") == ["name", "t/1", "t/2"]
    with store.transaction() as txn:
        txn.delete("name")
        txn.delete_prefix("t/")
    assert store.list("") == []


def test_transaction_is_atomic(store):
    store.put("keep", b"old")
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.put("keep", b"new")
        txn.put("other", b"x")
        raise RuntimeError("abort")
    assert store.get("keep") == b"old"
    assert store.get("other") is None
    with store.transaction() as txn:
        txn.put("a", b"1")
        txn.delete("keep")
    assert store.get("a") == b"1"
    assert store.get("keep") is None


def test_survives_reopen_and_read_only_sees_writes(tmp_path):
    path = tmp_path / "metadata.db"
    writer = SqliteMetadataStore(path)
    writer.put("k", b"v1")
    reader = SqliteMetadataStore(path, read_only=True)
    assert reader.get("k") == b"v1"
    writer.put("k", b"v2")
    assert reader.get("k") == b"v2"
    with pytest.raises(ReadOnlyError):
        reader.put("k", b"x")
    writer.close()
    reader.close()
    reopened = SqliteMetadataStore(path, read_only=True)
    assert reopened.get("k") == b"v2"
    reopened.close()


def test_usable_from_several_threads(store):
    def work(n):
        for i in range(50):
            store.put(f"t{n}/{i}", str(i).encode())

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.list("t")) == 200


def test_counters_move_forward_across_reopens(tmp_path):
    """bump_counter gives the counter's new value: the boot counter starts below zero so the
    first boot is 0, id reservations take the ranges below each new value."""
    path = tmp_path / "metadata.db"
    first = SqliteMetadataStore(path)
    assert [bump_counter(first, "boot", 1, initial=-1) for _ in range(2)] == [0, 1]
    assert bump_counter(first, "ids", 5) == 5
    first.close()
    second = SqliteMetadataStore(path)
    assert (bump_counter(second, "boot", 1, initial=-1), bump_counter(second, "ids", 3)) == (2, 8)
    second.close()


def test_a_transaction_begun_inside_another_is_part_of_it(store):
    """Many small writes share one commit (stopping a broker): an inner transaction commits
    with the outer one, and is undone with it."""
    commits = []
    store._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    with store.transaction() as outer:
        outer.put("a", b"1")
        store.put("b", b"2")  # a transaction of its own, inside
        with store.transaction() as inner:
            inner.put("c", b"3")
    assert [store.get(k) for k in "abc"] == [b"1", b"2", b"3"]
    assert commits == ["COMMIT"]

    with pytest.raises(RuntimeError), store.transaction():
        store.put("d", b"4")
        raise RuntimeError("the outer transaction fails after the inner one")
    assert store.get("d") is None
    store.put("e", b"5")  # the store goes on after a rolled-back batch
    assert store.get("e") == b"5"


def _in_thread(fn):
    """Run fn on a thread of its own; the event is set once it returned."""
    done, result = threading.Event(), []
    threading.Thread(target=lambda: (result.append(fn()), done.set()), daemon=True).start()
    return done, result


def test_a_read_does_not_wait_for_another_threads_write_transaction(store):
    """The event loop reads metadata while the sync thread or the transaction log commits (and
    fsyncs): the read returns the last committed value without waiting for that commit."""
    store.put("k", b"committed")
    store.put("t/a", b"")
    with write_held_open(store, {"k": b"uncommitted", "t/b": b""}):
        done, result = _in_thread(lambda: (store.get("k"), store.list("t/")))
        # Generous deadline: with the reads behind the writer's lock this waits it out and fails.
        assert done.wait(10), "a read waited for another thread's open write transaction"
        assert result == [(b"committed", ["t/a"])]
    assert (store.get("k"), store.list("t/")) == (b"uncommitted", ["t/a", "t/b"])


def test_a_thread_inside_a_write_transaction_reads_its_own_writes(store):
    store.put("k", b"old")
    with store.transaction() as txn:
        txn.put("k", b"new")
        txn.put("n", b"1")
        assert (store.get("k"), store.list("n")) == (b"new", ["n"])
        done, result = _in_thread(lambda: (store.get("k"), store.list("n")))
        assert done.wait(10)
        assert result == [(b"old", [])]  # other threads see the last commit only
    assert (store.get("k"), store.get("n")) == (b"new", b"1")


def test_reads_after_close_are_refused(tmp_path):
    s = SqliteMetadataStore(tmp_path / "metadata.db")
    s.put("k", b"v")
    assert s.get("k") == b"v"
    s.close()
    with pytest.raises(StorageClosedError):
        s.get("k")
    with pytest.raises(StorageClosedError):
        s.list("")


def test_reads_from_many_threads_see_commits_in_order_on_a_few_connections(store):
    """Readers beside a writer: each sees the counter move forward only, and the read
    connections number no more than the reads that ran at once."""
    store.put("n", b"0")
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            i += 1
            store.put("n", str(i).encode())

    def read(seen):
        for _ in range(200):
            seen.append(int(store.get("n")))

    writer = threading.Thread(target=write)
    writer.start()
    seen_by = [[] for _ in range(6)]
    readers = [threading.Thread(target=read, args=(seen,)) for seen in seen_by]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    stop.set()
    writer.join()
    assert all(seen == sorted(seen) and len(seen) == 200 for seen in seen_by)
    assert len(store._readers._idle) <= len(readers)
