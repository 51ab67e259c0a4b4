"""The transaction coordinator's log, over a real metadata store (SQLite, as the broker's):
what a restart finds, ends and times out. The participants are a recorder standing in for
topics: what the coordinator asks of them is what is checked here; the topics' side is
tested against a real broker (test_transactions.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from pathlib import Path

import pytest

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.transactions.coordinator import ID_BLOCK, OPEN, TransactionCoordinator, TxnMeta
from magnetar.broker.transactions.pending_ack import PendingAcks
from magnetar.storage import Position, SqliteMetadataStore
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import ABORT, COMMIT, TxnId


class Recorder:
    """Every end the coordinator asks for, in order."""

    def __init__(self) -> None:
        self.ends: list[tuple[str, ...]] = []
        self.fail = False
        self.open = asyncio.Event()
        """Cleared: every end waits (markers slower than the test)."""
        self.open.set()

    async def end_on_partition(self, topic: str, txn: TxnId, action: int) -> None:
        await self.open.wait()
        if self.fail:
            raise OSError("disk gone")
        self.ends.append(("partition", topic, str(txn), pb.TxnAction.Name(action)))

    async def end_on_subscription(self, topic: str, subscription: str, txn: TxnId, action: int) -> None:
        self.ends.append(("subscription", topic, subscription, str(txn), pb.TxnAction.Name(action)))


def _coordinator(path: Path, recorder: Recorder, max_active: int = 0) -> tuple[TransactionCoordinator,
                                                                                SqliteMetadataStore]:
    store = SqliteMetadataStore(path)
    return TransactionCoordinator(0, store, recorder, max_active), store


def test_a_decision_stored_before_a_crash_is_carried_out_after_it(tmp_path: Path) -> None:
    async def run() -> None:
        recorder = Recorder()
        coordinator, store = _coordinator(tmp_path / "m.db", recorder)
        committed = coordinator.new_txn(60)
        coordinator.add_partitions(committed, ["persistent://t/n/a", "persistent://t/n/b"])
        coordinator.add_subscriptions(committed, [("persistent://t/n/c", "sub")])
        recorder.fail = True  # the markers cannot be written: the end fails, the decision stays
        with pytest.raises(OSError):
            await coordinator.end_txn(committed, COMMIT)
        with pytest.raises(OSError):  # the client's retry tries again (and fails again)
            await coordinator.end_txn(committed, COMMIT)
        with pytest.raises(BrokerServiceError) as decided:
            await coordinator.end_txn(committed, ABORT)
        assert decided.value.code == pb.InvalidTxnStatus
        still_open = coordinator.new_txn(60)
        coordinator.add_partitions(still_open, ["persistent://t/n/a"])
        coordinator.stop()
        store.close()  # the crash: nothing but the store survives

        after = Recorder()
        revived, store = _coordinator(tmp_path / "m.db", after)
        revived.recover()
        await asyncio.sleep(0)  # the recovered end runs as a task
        assert await _ends(after, 3) == [
            ("partition", "persistent://t/n/a", "(0,1)", "COMMIT"),
            ("partition", "persistent://t/n/b", "(0,1)", "COMMIT"),
            ("subscription", "persistent://t/n/c", "sub", "(0,1)", "COMMIT"),
        ]
        assert revived.open_txn(still_open).partitions == ["persistent://t/n/a"]
        assert revived.new_txn(60).least > still_open.least  # ids are never handed out twice
        deadline = time.monotonic() + 5  # its ends are done: the transaction goes once their callbacks ran
        while revived.metadata(committed) is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        with pytest.raises(BrokerServiceError) as gone:
            revived.open_txn(committed)
        assert gone.value.code == pb.TransactionNotFound
        revived.stop()
        store.close()

    asyncio.run(run())


async def _ends(recorder: Recorder, count: int, timeout: float = 5.0) -> list[tuple[str, ...]]:
    deadline = time.monotonic() + timeout
    while len(recorder.ends) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return recorder.ends


def test_a_deadline_that_passed_while_down_aborts_at_once_after_restart(tmp_path: Path) -> None:
    async def run() -> None:
        store = SqliteMetadataStore(tmp_path / "m.db")
        expired = TxnId(0, 7)
        meta = TxnMeta(expired, OPEN, time.time() - 1, ["persistent://t/n/a"])
        store.put("/transactions/coordinator/0/txn/" + f"{7:020d}", meta.encode())
        recorder = Recorder()
        coordinator = TransactionCoordinator(0, store, recorder)
        coordinator.recover()
        assert await _ends(recorder, 1) == [("partition", "persistent://t/n/a", "(0,7)", "ABORT")]
        with pytest.raises(BrokerServiceError):
            coordinator.open_txn(expired)
        coordinator.stop()
        store.close()

    asyncio.run(run())


def test_status_rules(tmp_path: Path) -> None:
    async def run() -> None:
        recorder = Recorder()
        coordinator, store = _coordinator(tmp_path / "m.db", recorder, max_active=2)
        first = coordinator.new_txn(0)  # no timeout asked: the default, not "never"
        assert coordinator.open_txn(first).deadline > time.time() + 30
        coordinator.new_txn(10**9)  # clamped: a forgotten transaction cannot hold its topics for ever
        assert coordinator.open_txn(TxnId(0, 2)).deadline < time.time() + 2 * 24 * 3600
        with pytest.raises(BrokerServiceError) as full:
            coordinator.new_txn(10)
        assert full.value.code == pb.NotAllowedError
        await coordinator.end_txn(first, ABORT)
        with pytest.raises(BrokerServiceError) as ended:
            coordinator.add_partitions(first, ["persistent://t/n/x"])
        assert ended.value.code == pb.TransactionNotFound
        with pytest.raises(BrokerServiceError) as too_many:
            coordinator.add_partitions(TxnId(0, 2), [f"persistent://t/n/p{i}" for i in range(1001)])
        assert too_many.value.code == pb.NotAllowedError
        with pytest.raises(BrokerServiceError):
            await coordinator.end_txn(TxnId(0, 2), 7)  # no such action
        coordinator.stop()
        store.close()

    asyncio.run(run())


class HeldStore(SqliteMetadataStore):
    """The broker's store, whose commits wait (off the loop) until the test lets them go: a
    disk slower than the test."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.released = threading.Event()
        self.released.set()
        self.failing = False
        self.writers: list[str] = []
        """The threads that wrote, in order."""

    @contextmanager
    def transaction(self):
        self.writers.append(threading.current_thread().name)
        self.released.wait(10)
        if self.failing:
            raise OSError("disk gone")
        with super().transaction() as writer:
            yield writer


def _stored(path: Path, txn: TxnId) -> dict | None:
    """The record as another process (a restart) would read it."""
    reader = SqliteMetadataStore(path, read_only=True)
    try:
        raw = reader.get(f"/transactions/coordinator/0/txn/{txn.least:020d}")
    finally:
        reader.close()
    return None if raw is None else json.loads(raw)


def _with_held_store(path: Path, body: Callable[[HeldStore, TransactionCoordinator], Awaitable[None]],
                     recorder: Recorder | None = None) -> None:
    """`body` on a coordinator over a HeldStore at `path` (its participants `recorder`), both closed after."""
    async def run() -> None:
        store = HeldStore(path / "m.db")
        coordinator = TransactionCoordinator(0, store, recorder or Recorder())
        try:
            await body(store, coordinator)
        finally:
            coordinator.stop()
            store.close()

    asyncio.run(run())


def test_a_registration_is_answered_once_its_record_is_durable_and_never_before(tmp_path: Path) -> None:
    async def body(store: HeldStore, coordinator: TransactionCoordinator) -> None:
        txn = coordinator.new_txn(60)
        store.released.clear()
        registering = coordinator.register_partitions(txn, ["persistent://t/n/a"])
        assert registering is not None
        again = coordinator.register_partitions(txn, ["persistent://t/n/a"])
        assert again is registering  # named already, not durable yet: the same wait
        await asyncio.sleep(0.2)  # the loop runs on while the disk is slow
        assert not registering.done()
        assert _stored(tmp_path / "m.db", txn) is None
        store.released.set()
        await asyncio.wait_for(registering, 10)
        assert _stored(tmp_path / "m.db", txn)["partitions"] == ["persistent://t/n/a"]
        assert coordinator.register_partitions(txn, ["persistent://t/n/a"]) is None

    _with_held_store(tmp_path, body)


def test_transactions_registered_together_share_log_commits(tmp_path: Path) -> None:
    async def body(store: HeldStore, coordinator: TransactionCoordinator) -> None:
        txns = [coordinator.new_txn(60) for _ in range(50)]
        store.released.clear()
        waits = [coordinator.register_partitions(txn, [f"persistent://t/n/{txn.least}"]) for txn in txns]
        store.released.set()
        await asyncio.wait_for(asyncio.gather(*waits), 10)
        assert coordinator.log.appends <= 2  # the first write, then every other one in the next group
        for txn in txns:
            assert _stored(tmp_path / "m.db", txn)["partitions"] == [f"persistent://t/n/{txn.least}"]
        ends = [coordinator.end_txn(txn, COMMIT) for txn in txns]
        await asyncio.wait_for(asyncio.gather(*ends), 10)
        assert coordinator.log.appends <= 5  # the decisions grouped as well

    _with_held_store(tmp_path, body)


def test_an_ack_held_in_a_transaction_is_stored_off_the_loop_with_the_coordinators_records(tmp_path: Path) -> None:
    async def body(store: HeldStore, coordinator: TransactionCoordinator) -> None:
        txn = coordinator.new_txn(60)
        store.released.clear()
        registering = coordinator.register_subscriptions(txn, [("persistent://t/n/a", "sub")])
        pending = PendingAcks(store, "t/n/persistent/a", "sub")
        assert pending.hold(txn, [Position(1, 0)]) == [Position(1, 0)]
        holding = pending.saving(txn)
        assert registering is not None and holding is not None
        await asyncio.sleep(0.2)
        assert not holding.done()  # held at once, answered only once durable
        reader = SqliteMetadataStore(tmp_path / "m.db", read_only=True)
        assert PendingAcks.load(reader, "t/n/persistent/a", "sub") is None
        store.released.set()
        await asyncio.wait_for(asyncio.gather(registering, holding), 10)
        assert PendingAcks.load(reader, "t/n/persistent/a", "sub").positions == {Position(1, 0): txn}
        assert _stored(tmp_path / "m.db", txn)["subscriptions"] == [["persistent://t/n/a", "sub"]]
        assert coordinator.log.appends <= 2
        reader.close()

    _with_held_store(tmp_path, body)


def test_a_topic_loading_with_open_transactions_gets_those_the_log_does_not_know_ended(tmp_path: Path) -> None:
    """What a restart finds open on a partition whose messages were stored while the log
    recorded the partition: a transaction of an earlier run the log does not know is aborted
    there, one recorded open without the partition gets it, one decided without it is ended
    there as decided; one of this run, or of another coordinator, is left alone."""
    async def run() -> None:
        recorder = Recorder()
        coordinator, store = _coordinator(tmp_path / "m.db", recorder)
        unknown = coordinator.new_txn(60)  # its record never became durable
        still_open = coordinator.new_txn(60)
        coordinator.add_partitions(still_open, ["persistent://t/n/a"])
        decided = coordinator.new_txn(60)
        coordinator.add_partitions(decided, ["persistent://t/n/a"])
        recorder.fail = True
        with pytest.raises(OSError):
            await coordinator.end_txn(decided, COMMIT)
        coordinator.stop()
        store.close()

        revived, store = _coordinator(tmp_path / "m.db", Recorder())
        ends: list[tuple[TxnId, int]] = []
        found = [unknown, still_open, decided, TxnId(3, 1)]
        revived.found_open("persistent://t/n/b", found, lambda txn, action: ends.append((txn, action)))
        assert ends == []  # a topic that loads before the log is read waits for it
        revived.recover()
        assert ends == [(unknown, ABORT), (decided, COMMIT)]
        saving = revived.open_txn(still_open).saving
        assert saving is not None
        await asyncio.wait_for(saving, 10)
        assert _stored(tmp_path / "m.db", still_open)["partitions"] == ["persistent://t/n/a", "persistent://t/n/b"]
        this_run = revived.new_txn(60)
        revived.found_open("persistent://t/n/c", [this_run, still_open], lambda txn, action: ends.append((txn, action)))
        assert len(ends) == 2
        assert revived.open_txn(still_open).partitions[-1] == "persistent://t/n/c"
        revived.stop()
        store.close()

    asyncio.run(run())


def test_a_decision_is_answered_once_durable_with_what_was_written_together_before_the_markers(
        tmp_path: Path) -> None:
    """Kafka's EndTxn: decide() is done when the decision (and the record written together with
    it, in the same commit) is durable, while the participants still wait; a crash then finds
    the decision and ends the transaction."""
    async def run() -> None:
        recorder = Recorder()
        coordinator, store = _coordinator(tmp_path / "m.db", recorder)
        txn = coordinator.new_txn(60)
        await coordinator.register_partitions(txn, ["persistent://t/n/a"])  # type: ignore[misc]
        commits = coordinator.log.appends
        recorder.open.clear()
        with coordinator.log.together():
            beside = coordinator.log.write("/handler/record", lambda: b"decided")
            decided = coordinator.decide(txn, COMMIT)
        await asyncio.wait_for(asyncio.gather(beside, decided), 10)
        assert coordinator.log.appends == commits + 1  # one commit for both
        assert _stored(tmp_path / "m.db", txn)["status"] == "COMMITTING"
        assert recorder.ends == []  # answered before any participant ended it
        again = coordinator.decide(txn, COMMIT)  # a retry waits for the participants
        await asyncio.sleep(0.05)
        assert not again.done()
        coordinator.stop()
        store.close()  # the crash, markers unwritten

        after = Recorder()
        revived, store = _coordinator(tmp_path / "m.db", after)
        revived.recover()
        assert await _ends(after, 1) == [("partition", "persistent://t/n/a", str(txn), "COMMIT")]
        assert store.get("/handler/record") == b"decided"
        revived.stop()
        store.close()

    asyncio.run(run())


def test_a_participant_the_log_could_not_record_leaves_the_transaction_abort_only(tmp_path: Path) -> None:
    async def body(store: HeldStore, coordinator: TransactionCoordinator) -> None:
        txn = coordinator.new_txn(60)
        store.failing = True
        registering = coordinator.register_partitions(txn, ["persistent://t/n/a"])
        with pytest.raises(OSError):
            await asyncio.wait_for(registering, 10)
        store.failing = False
        assert coordinator.register_partitions(txn, ["persistent://t/n/a"]) is None  # its messages are stored anyway
        with pytest.raises(BrokerServiceError) as refused:
            await coordinator.end_txn(txn, COMMIT)
        assert refused.value.code == pb.TransactionConflict
        assert coordinator.metadata(txn) is None
        assert recorder.ends == [("partition", "persistent://t/n/a", str(txn), "ABORT")]

    recorder = Recorder()
    _with_held_store(tmp_path, body, recorder)


def test_new_transactions_reserve_their_ids_ahead_through_the_log(tmp_path: Path) -> None:
    """NEW_TXN does not write on the event loop once a run's first block is reserved: the next
    block goes through the log's group commits while half of the current one is left."""
    async def body(store: HeldStore, coordinator: TransactionCoordinator) -> None:
        coordinator.new_txn(60)
        store.writers.clear()
        ids = []
        for n in range(3 * ID_BLOCK):
            ids.append(coordinator.new_txn(60).least)
            if n % 100 == 0:  # a write asked for after the reservation is durable no sooner than it
                await asyncio.wait_for(coordinator.log.write("/test/barrier", lambda: None), 10)
        assert threading.current_thread().name not in store.writers
        assert ids == sorted(set(ids))
        assert int(store.get("/transactions/coordinator/0/sequence")) >= ids[-1]
        revived = TransactionCoordinator(0, store, Recorder())
        revived.recover()
        assert revived.new_txn(60).least > ids[-1]
        revived.stop()

    _with_held_store(tmp_path, body)
