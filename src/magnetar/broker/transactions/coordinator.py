"""The transaction coordinator (Pulsar's TransactionMetadataStoreService, one coordinator).

Each transaction with a participant is a record in the metadata store, written before the
answer leaves: its deadline and the partitions and subscriptions it touched (from the first
one on: a transaction that touched nothing has nothing to end after a crash), then
COMMITTING or ABORTING once END_TXN decides, and deleted (with the next record written) when
every participant has ended it.
A restart reads the records back: an open transaction's deadline is armed again (it is
aborted when it passes, as Pulsar's timeout tracker does), and a decided one is ended
again on every participant (ending twice writes a second marker, which changes nothing).

A partition's record is written while the transaction's first messages there are stored
(the SEND is answered once both are durable), so a crash can leave messages of a
transaction on a partition its record does not name. Each topic that loads tells the
coordinator which transactions it holds open (`found_open`): one of an earlier run that
the log does not know at all (its id was reserved before this run, and it ended or was
never recorded) is aborted there; one recorded as still open gets the partition added (its
client may still commit it, and sends the unanswered messages again); one decided without
the partition (which the log's order rules out) is ended there as decided.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.transactions.log import settle, shared_log
from magnetar.broker.transactions.records import ABORTING, COMMITTING, OPEN, CoordinatorStats, TxnMeta
from magnetar.storage import MetadataStore, bump_counter
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import ABORT, COMMIT, TxnId

log = logging.getLogger(__name__)
_PREFIX = "/transactions/coordinator/"
#: What a NEW_TXN without a timeout gets (the Java client's default transaction timeout).
DEFAULT_TIMEOUT_SECONDS = 60
#: The longest timeout a client may ask for: a forgotten transaction holds back every
#: reader of the topics it wrote to, so it cannot be open for ever.
MAX_TIMEOUT_SECONDS = 24 * 3600
Caller = tuple[str | None, bool]
"""Who asks: the connection's role (None: authentication is off) and whether it is a super user."""
ANYONE: Caller = (None, False)
#: Transaction ids reserved in the store at a time.
ID_BLOCK = 1000
#: The longest list of partitions or subscriptions one command may name.
MAX_NAMES_PER_COMMAND = 1000


class Participants(Protocol):
    """The topics a coordinator ends a transaction on (the broker service): each end is done
    once durable (None: there was nothing to end)."""

    def end_on_partition(self, topic: str, txn: TxnId, action: int) -> Awaitable[None] | None: ...

    def end_on_subscription(self, topic: str, subscription: str, txn: TxnId,
                            action: int) -> Awaitable[None] | None: ...


def _not_found(txn: TxnId) -> BrokerServiceError:
    return BrokerServiceError(pb.TransactionNotFound, f"transaction {txn} not found (ended, timed out or never opened)")


class _AbortedInstead(BrokerServiceError):
    """A commit of a transaction that can only abort (TxnMeta.unrecorded): it is aborted."""

    abort: asyncio.Future[None]
    """The abort's ending."""


def _failing_after(ending: asyncio.Future[None], refused: BrokerServiceError) -> asyncio.Future[None]:
    """A future that fails once `ending` is done: as it failed, or else with `refused`."""
    failing = asyncio.get_running_loop().create_future()

    def ended(done: asyncio.Future[None]) -> None:
        if not failing.done():
            failing.set_exception(refused if done.cancelled() or done.exception() is None else done.exception())

    ending.add_done_callback(ended)
    return failing


def _failure(done: asyncio.Future[None]) -> BaseException | None:
    """Why a future failed (a cancelled one: CancelledError), or None."""
    return asyncio.CancelledError() if done.cancelled() else done.exception()


def _retrieve(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


class TransactionCoordinator:
    """Transaction ids' least significant bits count from 1: a SEND or an ACK whose
    txnid_least_bits is 0 (the field's default) is no transaction's, which the publish path
    tells by one attribute read instead of a HasField per SEND."""

    def __init__(self, coordinator_id: int, store: MetadataStore, participants: Participants,
                 max_active: int = 0) -> None:
        self.coordinator_id = coordinator_id
        self._store = store
        self._participants = participants
        self._max_active = max_active
        self._txns: dict[TxnId, TxnMeta] = {}
        self._timers: dict[TxnId, asyncio.TimerHandle] = {}
        self._endings: dict[TxnId, asyncio.Future[None]] = {}
        self._prefix = f"{_PREFIX}{coordinator_id}/"
        self.log = shared_log(store)
        self.stats = CoordinatorStats()
        self.recovered = (0.0, 0.0)
        """Wall-clock seconds when recovery started and ended (0: not yet)."""
        self._next_least = 1
        self._reserved_until = 1
        self._reserving: int | None = None
        """The end of the next block, on its way to the disk through the log."""
        self._reserved_ahead = 0
        """The end of the next block, durable (0: none yet)."""
        self._earlier_runs_upto = int(store.get(f"{self._prefix}sequence") or 0)
        """The last id earlier runs may have handed out (this run's come from blocks after it)."""
        self._found_early: list[tuple[str, list[TxnId], Callable[[TxnId, int], None]]] = []
        """Topics that loaded before `recover` ran, and what they found open."""

    @property
    def active_count(self) -> int:
        """Transactions open, or decided and not yet ended on every participant."""
        return len(self._txns)

    @property
    def last_id(self) -> int:
        """The least significant bits of the last transaction id handed out (0: none yet)."""
        return self._next_least - 1

    def metadata(self, txn: TxnId) -> TxnMeta | None:
        """A transaction not yet ended on every participant (None: ended or unknown)."""
        return self._txns.get(txn)

    def unfinished(self) -> list[TxnMeta]:
        """Every transaction not yet ended on every participant, oldest id first."""
        return sorted(self._txns.values(), key=lambda meta: meta.txn)

    # -- records
    def _key(self, txn: TxnId) -> str:
        return f"{self._prefix}txn/{txn.least:020d}"

    def _save(self, meta: TxnMeta) -> None:
        """The record, durable before this returns (with every write queued: see log.py)."""
        self.log.write_now(self._key(meta.txn), meta.encode)
        meta.stored = True

    def _save_later(self, meta: TxnMeta) -> asyncio.Future[None]:
        """The record, in the log's next group commit, off the loop; done once durable.
        Records of transactions ended since the last commit are deleted with it (a record
        left by a crash is ended again, which changes nothing)."""
        meta.stored = True
        return self.log.write(self._key(meta.txn), meta.encode)

    def _decided(self, meta: TxnMeta, status: str) -> asyncio.Future[None] | None:
        """The decision, stored (the future) before any participant hears it; None when
        the transaction touched nothing (there is nothing to end after a crash)."""
        meta.status = status
        if meta.partitions or meta.subscriptions:
            return self._save_later(meta)
        return None

    def _next_id(self) -> TxnId:
        """Ids come from blocks reserved in the store, a write per ID_BLOCK transactions: no
        id is handed out twice, even after a crash (the rest of a block is skipped). The next
        block is reserved through the log while half of the current one is left, so NEW_TXN
        does not wait for the disk (but for the first block of a run, or when transactions
        open faster than the log commits)."""
        if self._next_least >= self._reserved_until:
            if self._reserved_ahead > self._reserved_until:
                self._reserved_until = self._reserved_ahead
            else:
                self._reserved_until = bump_counter(self._store, f"{self._prefix}sequence", ID_BLOCK)
                self._next_least = max(self._next_least, self._reserved_until - ID_BLOCK + 1)
        elif self._reserving is None and self._reserved_until - self._next_least <= ID_BLOCK // 2 \
                and self._reserved_ahead <= self._reserved_until:
            self._reserve_ahead(self._reserved_until + ID_BLOCK)
        txn = TxnId(self.coordinator_id, self._next_least)
        self._next_least += 1
        return txn

    def _reserve_ahead(self, until: int) -> None:
        self._reserving = until
        self.log.write(f"{self._prefix}sequence", lambda: str(until).encode()).add_done_callback(
            lambda done: self._reserved(done, until))

    def _reserved(self, done: asyncio.Future[None], until: int) -> None:
        self._reserving = None
        if not done.cancelled() and done.exception() is None:
            self._reserved_ahead = max(self._reserved_ahead, until)

    def recover(self) -> None:
        """Read every unfinished transaction back, on the running loop: open ones get their
        deadline again, decided ones are ended again."""
        self.recovered = (time.time(), 0.0)
        for key in self._store.list(f"{self._prefix}txn/"):
            raw = self._store.get(key)
            if raw is None:
                continue
            txn = TxnId(self.coordinator_id, int(key.rsplit("/", 1)[1]))
            meta = self._txns[txn] = TxnMeta.decode(txn, raw)
            meta.stored = True
            if meta.status == OPEN:
                self._arm(meta)
            else:
                self._start_ending(meta, COMMIT if meta.status == COMMITTING else ABORT)
        self.recovered = (self.recovered[0], time.time())
        if self._txns:
            log.info("transaction coordinator %d recovered %d unfinished transactions", self.coordinator_id,
                     len(self._txns))
        found, self._found_early = self._found_early, []
        for partition, txns, end in found:
            self.found_open(partition, txns, end)

    def found_open(self, partition: str, txns: Iterable[TxnId], end: Callable[[TxnId, int], None]) -> None:
        """`txns` have messages and no marker on `partition`, which just loaded: `end` is
        called with each that must be ended there at once, and how (see the module's docstring)."""
        if not self.recovered[1]:
            self._found_early.append((partition, list(txns), end))
            return
        for txn in txns:
            if txn.most != self.coordinator_id:
                continue
            meta = self._txns.get(txn)
            if meta is None:
                if txn.least <= self._earlier_runs_upto:
                    log.info("transaction %s on %s: not in the log (a crash before it named the partition): "
                             "aborted there", txn, partition)
                    end(txn, ABORT)
            elif partition not in meta.partitions:
                if meta.status != OPEN:
                    end(txn, COMMIT if meta.status == COMMITTING else ABORT)
                    continue
                try:
                    self._register(meta, self._add(meta, meta.partitions, [partition], "partitions"))
                except BrokerServiceError as exc:  # too many partitions: it can only abort
                    meta.unrecorded = exc.message

    # -- commands
    def new_txn(self, timeout_seconds: int, owner: str | None = None, producer: str = "") -> TxnId:
        if self._max_active and len(self._txns) >= self._max_active:
            raise BrokerServiceError(pb.NotAllowedError,
                                     f"{len(self._txns)} transactions are open (maxActiveTransactionsPerCoordinator)")
        timeout = min(timeout_seconds or DEFAULT_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS)
        txn = self._next_id()
        now = time.time()
        meta = TxnMeta(txn, OPEN, now + timeout, owner=owner, opened=time.monotonic(),
                       opened_at=now, producer=producer)  # stored with its first participant
        self.stats.created += 1
        self._txns[txn] = meta
        self._arm(meta)
        return txn

    def _owned(self, txn: TxnId, caller: Caller) -> TxnMeta:
        meta = self._txns.get(txn)
        if meta is None:
            raise _not_found(txn)
        role, privileged = caller
        if meta.owner is not None and meta.owner != role and not privileged:
            raise BrokerServiceError(pb.AuthorizationError,
                                     f"transaction {txn} belongs to another role than {role!r}")
        return meta

    def open_txn(self, txn: TxnId, caller: Caller = ANYONE) -> TxnMeta:
        """The transaction, which must still take messages and acknowledgements, and belong
        to the caller (role, whether a super user)."""
        meta = self._owned(txn, caller)
        if meta.status != OPEN:
            raise BrokerServiceError(pb.InvalidTxnStatus, f"transaction {txn} is {meta.status}, not OPEN")
        return meta

    def add_partitions(self, txn: TxnId, partitions: list[str], caller: Caller = ANYONE) -> None:
        """Record the partitions, durably before this returns (a commit on the loop:
        `register_partitions` is the way that does not wait)."""
        meta = self.open_txn(txn, caller)
        if self._add(meta, meta.partitions, partitions, "partitions") or self._unsaved(meta):
            self._save(meta)  # the first participant stores the transaction, with its deadline

    def add_subscriptions(self, txn: TxnId, subscriptions: list[tuple[str, str]], caller: Caller = ANYONE) -> None:
        """As add_partitions, for subscriptions (see register_subscriptions)."""
        meta = self.open_txn(txn, caller)
        if self._add(meta, meta.subscriptions, subscriptions, "subscriptions") or self._unsaved(meta):
            self._save(meta)

    @staticmethod
    def _unsaved(meta: TxnMeta) -> bool:
        """Participants named already may still be on their way to the disk."""
        return meta.saving is not None and not meta.saving.done()

    def register_partitions(self, txn: TxnId, partitions: list[str],
                            caller: Caller = ANYONE) -> asyncio.Future[None] | None:
        """Record the partitions in the log's next group commit: the future is done once
        the record naming them is durable (None: it is already)."""
        meta = self.open_txn(txn, caller)
        return self._register(meta, self._add(meta, meta.partitions, partitions, "partitions"))

    def register_subscriptions(self, txn: TxnId, subscriptions: list[tuple[str, str]],
                               caller: Caller = ANYONE) -> asyncio.Future[None] | None:
        """As register_partitions, for subscriptions."""
        meta = self.open_txn(txn, caller)
        return self._register(meta, self._add(meta, meta.subscriptions, subscriptions, "subscriptions"))

    def _register(self, meta: TxnMeta, added: list) -> asyncio.Future[None] | None:
        if added:
            saving = meta.saving = self._save_later(meta)
            saving.add_done_callback(lambda done: self._unless_saved(meta, done))
        elif not self._unsaved(meta):
            meta.saving = None
        return meta.saving

    @staticmethod
    def _unless_saved(meta: TxnMeta, done: asyncio.Future[None]) -> None:
        """A record that could not be written: the participants it named stay known (their
        messages may be stored, and an abort must reach them), and the transaction can only
        abort (its client saw the SENDs or ACKs fail)."""
        if done.cancelled() or done.exception() is not None:
            meta.unrecorded = f"the transaction log could not record its participants: " \
                f"{'cancelled' if done.cancelled() else done.exception()}"

    @staticmethod
    def _add(meta: TxnMeta, known: list, names: list, what: str) -> list:
        """Add the participants not known yet; those it added."""
        new = [name for name in dict.fromkeys(names) if name not in known]
        if len(known) + len(new) > MAX_NAMES_PER_COMMAND:
            raise BrokerServiceError(pb.NotAllowedError, f"a transaction spans at most {MAX_NAMES_PER_COMMAND} {what}")
        known += new
        return new

    async def end_txn(self, txn: TxnId, action: int, caller: Caller = ANYONE) -> None:
        """Commit or abort: the decision is stored before any participant hears it, and the
        answer waits until every participant has ended the transaction (a commit that aborts
        instead fails once the abort is done)."""
        await asyncio.shield(self.ending(txn, action, caller))

    def ending(self, txn: TxnId, action: int, caller: Caller = ANYONE) -> asyncio.Future[None]:
        """As end_txn, without a coroutine and a task of its own (END_TXN's answer is a
        callback on it): done once every participant has ended the transaction; a refusal
        to start is raised at once. The ending itself: not to be cancelled."""
        try:
            return self._begin_ending(txn, action, caller)[1]
        except _AbortedInstead as refused:
            return _failing_after(refused.abort, refused)

    def decide(self, txn: TxnId, action: int, caller: Caller = ANYONE) -> asyncio.Future[None]:
        """As end_txn, done once the decision is durable (Kafka's coordinator answers EndTxn
        then): the participants hear it after, and a restart ends it from its record. One
        decided before (a retry) is done once every participant has ended it."""
        decided, ending = self._begin_ending(txn, action, caller)
        return asyncio.shield(decided if decided is not None else ending)

    def _begin_ending(self, txn: TxnId, action: int,
                      caller: Caller) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """The decision's write when this call made it (else None), and the ending started
        (or the one under way)."""
        if action not in (COMMIT, ABORT):
            raise BrokerServiceError(pb.NotAllowedError, f"unknown transaction action {action}")
        meta = self._owned(txn, caller)
        if action == COMMIT and meta.status == OPEN and meta.unrecorded is not None:
            refused = _AbortedInstead(pb.TransactionConflict, f"transaction {txn} was aborted: {meta.unrecorded}")
            refused.abort = self._begin_ending(txn, ABORT, caller)[1]
            raise refused
        wanted = COMMITTING if action == COMMIT else ABORTING
        if meta.status == OPEN:
            self._disarm(txn)
            decided = self._decided(meta, wanted)
            return decided, self._start_ending(meta, action, decided)
        if meta.status != wanted:
            raise BrokerServiceError(pb.InvalidTxnStatus, f"transaction {txn} is already {meta.status}")
        return None, self._start_ending(meta, action)  # the one under way, or again after one that failed

    # -- ending
    # Callbacks, not a task: from the decision durable to the answer written, no more turns
    # of the loop than the futures themselves take (a task's steps and a gather's took three more).
    def _start_ending(self, meta: TxnMeta, action: int,
                      decided: asyncio.Future[None] | None = None) -> asyncio.Future[None]:
        """The ending: done once every participant ended the transaction (maybe already, when
        it had none)."""
        under_way = self._endings.get(meta.txn)
        if under_way is not None:
            return under_way
        ending = self._endings[meta.txn] = asyncio.get_running_loop().create_future()
        ending.add_done_callback(_retrieve)  # logged below; a timeout's ending has no one awaiting it
        if decided is None:
            self._end_participants(meta, action, ending)
        else:  # no participant hears of it before it is durable
            decided.add_done_callback(lambda done: self._decision_stored(meta, action, ending, done))
        return ending

    def _decision_stored(self, meta: TxnMeta, action: int, ending: asyncio.Future[None],
                         decided: asyncio.Future[None]) -> None:
        exc = _failure(decided)
        if exc is None:
            self._end_participants(meta, action, ending)
            return
        self._endings.pop(meta.txn, None)
        log.error("transaction %s: its decision could not be stored; it stays open", meta.txn, exc_info=exc)
        meta.status = OPEN  # decided again by a retry, or by its timeout (a second later at the soonest)
        meta.deadline = max(meta.deadline, time.time() + 1)
        self._arm(meta)
        settle(ending, exc)

    def _end_participants(self, meta: TxnMeta, action: int, ending: asyncio.Future[None]) -> None:
        participants = self._participants
        try:
            ends = [participants.end_on_partition(topic, meta.txn, action) for topic in meta.partitions]
            ends += [participants.end_on_subscription(topic, sub, meta.txn, action)
                     for topic, sub in meta.subscriptions]
            waits = [asyncio.ensure_future(end) for end in ends if end is not None]
        except Exception as exc:
            self._ended(meta, action, ending, exc)
            return
        left, failed = len(waits), []

        def one_ended(done: asyncio.Future[None]) -> None:
            nonlocal left
            left -= 1
            exc = _failure(done)
            if exc is not None:
                failed.append(exc)
            if not left:
                self._ended(meta, action, ending, failed[0] if failed else None)

        for wait in waits:
            wait.add_done_callback(one_ended)
        if not waits:
            self._ended(meta, action, ending, None)

    def _ended(self, meta: TxnMeta, action: int, ending: asyncio.Future[None], exc: BaseException | None) -> None:
        self._endings.pop(meta.txn, None)
        if exc is not None:
            log.error("transaction %s: ending on its participants failed; tried again after a restart", meta.txn,
                      exc_info=exc)
            settle(ending, exc)
            return
        if meta.stored:
            self.log.forget_later(self._key(meta.txn))  # deleted with the next record written
        self._txns.pop(meta.txn, None)
        self.stats.ended(action, meta.opened)
        log.debug("transaction %s %s", meta.txn, "committed" if action == COMMIT else "aborted")
        settle(ending, None)

    # -- timeouts
    def _arm(self, meta: TxnMeta) -> None:
        delay = max(0.0, meta.deadline - time.time())
        self._timers[meta.txn] = asyncio.get_running_loop().call_later(delay, self._timed_out, meta.txn)

    def _disarm(self, txn: TxnId) -> None:
        timer = self._timers.pop(txn, None)
        if timer is not None:
            timer.cancel()

    def _timed_out(self, txn: TxnId) -> None:
        self._timers.pop(txn, None)
        meta = self._txns.get(txn)
        if meta is not None and meta.status == OPEN:
            log.info("transaction %s timed out: aborted", txn)
            self.stats.timed_out += 1
            self._start_ending(meta, ABORT, self._decided(meta, ABORTING))

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for ending in self._endings.values():
            ending.cancel()
        self.log.close()
