"""Kafka transactions (`transactional.id`) as Pulsar transactions, as Kafka-on-Pulsar runs them.

A transactional id is a record in the metadata store: its producer id and epoch, its
`transaction.timeout.ms`, and the transaction under way, which IS a transaction of the
broker's coordinator (broker.transactions): its first AddPartitionsToTxn opens one (the
coordinator's timeout is the producer's), each partition is a participant of it, and its
records are stored through the partition's transaction buffer (produce names the
transaction in their MessageMetadata). EndTxn is the coordinator's END_TXN: its commit or
abort markers, which Pulsar readers skip and Kafka fetchers read as control batches.

Group offsets sent in a transaction (TxnOffsetCommit) are kept in the record and become
the group's (and its Pulsar subscriptions') when it commits. The record is written through
the coordinator's log, in the same commits as the coordinator's records (which other
transactions share, off the loop): a partition added is in both or neither, and so is the
decision, so a restart finishes what a crash cut short: the coordinator's transaction is
ended the same way and the offsets of a commit applied. EndTxn is answered once the
decision is durable, as Kafka answers it; the markers follow, and the producer's next
transaction waits for them before it stores anything.

A new InitProducerId for an id aborts the transaction its previous producer left open and
bumps the epoch: the old producer, a zombie, is fenced (its requests carry an older
epoch). A transaction the coordinator aborted at its timeout fences its producer too, as
Kafka's coordinator does by bumping the epoch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from kio.schema.errors import ErrorCode

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.protocol_handlers import HandlerBroker
from magnetar.broker.transactions.coordinator import TransactionCoordinator
from magnetar.kafka.errors import TxnRefused
from magnetar.kafka.producer_snapshots import producer_name
from magnetar.kafka.topics import KafkaTopics
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import ABORT, COMMIT, TxnId

log = logging.getLogger(__name__)
#: Kafka's transaction states, as DescribeTransactions and ListTransactions name them.
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT = "Empty", "Ongoing", "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT)
#: Kafka's transaction.max.timeout.ms default: a longer transaction.timeout.ms is refused.
MAX_TIMEOUT_MS = 900_000
#: Kafka's transactional.id.expiration.ms default: an id unused this long is forgotten.
EXPIRATION_MS = 7 * 24 * 3600 * 1000
#: Offsets one transaction may carry (each TxnOffsetCommit rewrites its record).
MAX_OFFSETS = 10_000
MAX_GROUPS = 100
#: Transactional ids the broker keeps (each a record): a client inventing ids cannot fill the store.
MAX_TRANSACTIONAL_IDS = 100_000
#: How long AddPartitionsToTxn, AddOffsetsToTxn or InitProducerId waits for the markers of the
#: producer's last transaction before it answers CONCURRENT_TRANSACTIONS (clients retry).
ENDING_WAIT_SECONDS = 5.0
#: Ids the expiry pass looks at in one turn of the event loop.
EXPIRY_CHUNK = 1000
_PREFIX = "kafka/transactions/"
_MAX_EPOCH = 32767


@dataclass
class KafkaTxn:
    namespace: str
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    owner: str | None
    status: str = EMPTY
    txn: TxnId | None = None
    started: int = 0
    """Broker time (ms) the last transaction began (the id's first InitProducerId before one)."""
    used: int = 0
    """Broker time (ms) of the id's last InitProducerId or transaction: it expires after EXPIRATION_MS."""
    partitions: list[tuple[str, int]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    offsets: dict[tuple[str, str, int], tuple[int, str | None]] = field(default_factory=dict)
    """(group, topic, partition) -> (offset, metadata) sent with TxnOffsetCommit, applied on commit."""
    unsaved: set[tuple[str, int]] = field(default_factory=set)
    """Partitions added whose records are not durable yet (not stored: in memory only)."""
    ending: tuple[TxnId, int] | None = None
    """The last transaction and its action while its markers may still be on their way: stored
    with the end, so that after a restart the next transaction still waits for them."""

    def encode(self) -> bytes:
        return json.dumps({
            "pid": self.producer_id, "epoch": self.epoch, "timeout": self.timeout_ms, "owner": self.owner,
            "status": self.status, "txn": None if self.txn is None else list(self.txn), "started": self.started,
            "used": self.used, "partitions": self.partitions, "groups": self.groups,
            "offsets": [[*key, *value] for key, value in self.offsets.items()],
            "ending": None if self.ending is None else [*self.ending[0], self.ending[1]]}).encode()

    @classmethod
    def decode(cls, namespace: str, transactional_id: str, raw: bytes) -> KafkaTxn:
        data = json.loads(raw)
        ending = data.get("ending")  # records of earlier releases have none
        return cls(namespace, transactional_id, int(data["pid"]), int(data["epoch"]), int(data["timeout"]),
                   data["owner"], data["status"], None if data["txn"] is None else TxnId(*data["txn"]),
                   int(data["started"]), int(data["used"]), [(t, int(p)) for t, p in data["partitions"]],
                   list(data["groups"]), {(g, t, int(p)): (int(o), m) for g, t, p, o, m in data["offsets"]},
                   ending=None if ending is None else (TxnId(int(ending[0]), int(ending[1])), int(ending[2])))


def _nothing() -> None:
    return None


def _logged(saved: asyncio.Future[None]) -> None:
    if not saved.cancelled() and saved.exception() is not None:
        log.warning("Kafka transaction record not stored (a restart decides it again): %s", saved.exception())


def _expiry_failed(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("Kafka transactional id expiry pass failed (the next one tries again): %s", done.exception())


def _now() -> int:
    return int(time.time() * 1000)


def fenced(version_with_fenced: bool) -> ErrorCode:
    """Kafka's answer to an older epoch: PRODUCER_FENCED for clients that know it (KIP-588),
    INVALID_PRODUCER_EPOCH for older request versions."""
    return ErrorCode.producer_fenced if version_with_fenced else ErrorCode.invalid_producer_epoch


class KafkaTransactions:
    """The transactional ids of every namespace the listener serves, loaded from the store at
    start; the transactions themselves live on the broker's coordinator."""

    def __init__(self, broker: HandlerBroker, coordinator: TransactionCoordinator,
                 allocate_producer_id: Callable[[], int]) -> None:
        self._broker = broker
        self._coordinator = coordinator
        self._allocate = allocate_producer_id
        self.ids: dict[tuple[str, str], KafkaTxn] = {}
        self._next_expiry = 0
        self.expiring: asyncio.Future[None] | None = None
        """The expiry pass under way, or the last one."""
        self.ready = False
        """Set once `recover` ran: until then the coordinator may not know its transactions yet."""
        for key in broker.state_keys(_PREFIX):
            namespace, _, quoted = key[len(_PREFIX):].rpartition("/")
            raw = broker.state(key)
            if raw is None:
                continue
            try:
                state = KafkaTxn.decode(unquote(namespace), unquote(quoted), raw)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("unreadable Kafka transaction record %s (%s): dropped", key, exc)
                continue
            self.ids[(state.namespace, state.transactional_id)] = state

    # -- records
    @staticmethod
    def _key(state: KafkaTxn) -> str:
        return f"{_PREFIX}{quote(state.namespace, safe='')}/{quote(state.transactional_id, safe='')}"

    def _save_later(self, state: KafkaTxn) -> asyncio.Future[None]:
        """The record in the coordinator log's next group commit (shared with the coordinator's
        records and every other id's, off the loop), as it is when that commit is dispatched."""
        return self._broker.log_state(self._key(state), state.encode)

    def _save_unwaited(self, state: KafkaTxn) -> None:
        """The record in the next group commit, for changes a restart would make again if it
        were lost (a transaction's end after its decision, a timeout's fencing)."""
        self._save_later(state).add_done_callback(_logged)

    def _forget(self, state: KafkaTxn) -> None:
        """The id goes (an expired one: should the delete be lost, it expires again)."""
        self._broker.log_state(self._key(state), _nothing).add_done_callback(_logged)
        self.ids.pop((state.namespace, state.transactional_id), None)

    # -- InitProducerId
    async def init_producer(self, namespace: str, transactional_id: str, timeout_ms: int, role: str | None,
                            producer_id: int, epoch: int, *, version_with_fenced: bool) -> tuple[int, int]:
        """The id's producer id and a new epoch, answered once durable (another InitProducerId
        meanwhile takes the next one); a transaction its previous producer left open is aborted
        first (that producer is fenced from now on)."""
        self._check_ready()
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise TxnRefused(ErrorCode.invalid_transaction_timeout,
                             f"transaction.timeout.ms={timeout_ms} is not within 1..{MAX_TIMEOUT_MS}")
        self._expire()
        state = self.ids.get((namespace, transactional_id))
        if state is None and len(self.ids) >= MAX_TRANSACTIONAL_IDS and self.expiring is not None:
            await asyncio.wait([self.expiring])  # at the cap: the expired ids go first, then the new one is decided
            state = self.ids.get((namespace, transactional_id))
        if state is None:
            if len(self.ids) >= MAX_TRANSACTIONAL_IDS:
                raise TxnRefused(ErrorCode.transactional_id_authorization_failed,
                                 f"the broker keeps at most {MAX_TRANSACTIONAL_IDS} transactional ids")
            state = KafkaTxn(namespace, transactional_id, self._allocate(), -1, timeout_ms, role, started=_now())
        else:
            self._check_owner(state, role)
            if producer_id >= 0 and (producer_id, epoch) != (state.producer_id, state.epoch):
                raise TxnRefused(fenced(version_with_fenced),
                                 f"producer {producer_id} epoch {epoch} is not the id's current one")
            if state.txn is not None:
                log.info("Kafka transactional id %r: a new producer; its transaction %s (%s) is ended first",
                         transactional_id, state.txn, state.status)
            await self._previous_ended(state)
            await self._finish(state, abort_open=True)
        state.timeout_ms = timeout_ms
        if state.epoch >= _MAX_EPOCH - 1:  # epochs are int16: a new producer id starts over
            state.producer_id, state.epoch = self._allocate(), -1
        state.epoch += 1
        state.used = _now()
        self.ids[(namespace, transactional_id)] = state
        given = state.producer_id, state.epoch
        await self._save_later(state)
        return given

    def _expire(self) -> None:
        """Ids with no transaction unused for EXPIRATION_MS go (Kafka's transactional.id.expiration.ms),
        looked for at most once a minute, by a pass in the background."""
        now = _now()
        if now < self._next_expiry or (self.expiring is not None and not self.expiring.done()):
            return
        self._next_expiry = now + 60_000
        self.expiring = asyncio.ensure_future(self._expire_pass(now - EXPIRATION_MS))
        self.expiring.add_done_callback(_expiry_failed)

    async def _expire_pass(self, horizon: int) -> None:
        """Every id looked at, EXPIRY_CHUNK of them a turn of the event loop (up to
        MAX_TRANSACTIONAL_IDS: milliseconds at once), each as it is when its turn comes."""
        for seen, (key, state) in enumerate(list(self.ids.items()), 1):
            if not seen % EXPIRY_CHUNK:
                await asyncio.sleep(0)
            if state.used < horizon and state.txn is None and self.ids.get(key) is state:
                self._forget(state)

    # -- the checks every transactional request makes
    def _check_ready(self) -> None:
        if not self.ready:  # Kafka's answer while a coordinator loads its log: clients retry
            raise TxnRefused(ErrorCode.coordinator_load_in_progress, "the transaction coordinator is recovering")

    @staticmethod
    def _check_owner(state: KafkaTxn, role: str | None) -> None:
        if state.owner is not None and state.owner != role:
            raise TxnRefused(ErrorCode.transactional_id_authorization_failed,
                             f"transactional id {state.transactional_id!r} belongs to another role than {role!r}")

    def producer(self, namespace: str, transactional_id: str, producer_id: int, epoch: int, role: str | None,
                 *, version_with_fenced: bool = True) -> KafkaTxn:
        """The id's state, for its current producer only: an older epoch is fenced, an unknown
        id or producer id is INVALID_PRODUCER_ID_MAPPING, as Kafka answers."""
        self._check_ready()
        state = self.ids.get((namespace, transactional_id))
        if state is None or state.producer_id != producer_id:
            raise TxnRefused(ErrorCode.invalid_producer_id_mapping,
                             f"transactional id {transactional_id!r} has no producer {producer_id}")
        self._check_owner(state, role)
        if epoch != state.epoch:
            raise TxnRefused(fenced(version_with_fenced) if epoch < state.epoch else
                             ErrorCode.invalid_producer_epoch, f"producer {producer_id} epoch {epoch} is fenced "
                             f"(the id's epoch is {state.epoch})")
        if state.txn is not None and not self._still_open(state):
            raise TxnRefused(fenced(version_with_fenced),
                             f"transaction of {transactional_id!r} timed out and was aborted")
        if state.status in (PREPARE_COMMIT, PREPARE_ABORT):
            raise TxnRefused(ErrorCode.concurrent_transactions, "the transaction is still ending")
        return state

    def _still_open(self, state: KafkaTxn) -> bool:
        """Whether the coordinator still has the transaction open; one it aborted at its
        timeout ends here too, and its producer is fenced (the epoch goes up)."""
        if state.status != ONGOING or state.txn is None:
            return True
        try:
            self._coordinator.open_txn(state.txn)
        except BrokerServiceError:
            log.info("Kafka transaction %r (%s) timed out: aborted, producer %d fenced", state.transactional_id,
                     state.txn, state.producer_id)
            state.ending = (state.txn, ABORT)  # the coordinator's abort: its markers may be on their way
            self._ended(state, COMPLETE_ABORT)
            state.epoch += 1
            self._save_unwaited(state)
            return False
        return True

    # -- a transaction's parts
    def _open(self, state: KafkaTxn) -> bool:
        """Open the transaction on the coordinator, with the producer's timeout, unless one is
        under way; whether it did (the record must then be written)."""
        if state.txn is not None:
            return False
        try:
            # its markers name the producer (id and epoch): Kafka fetchers need them on each marker
            state.txn = self._coordinator.new_txn(max(1, -(-state.timeout_ms // 1000)),
                                                  producer=producer_name(state.producer_id, state.epoch))
        except BrokerServiceError as exc:  # maxActiveTransactionsPerCoordinator
            raise TxnRefused(ErrorCode.concurrent_transactions, exc.message) from None
        state.status, state.started, state.used = ONGOING, _now(), _now()
        state.partitions, state.groups, state.offsets = [], [], {}
        return True

    async def _previous_ended(self, state: KafkaTxn) -> None:
        """The markers of the producer's last transaction, written before its next one stores
        anything: a producer's records never precede its last transaction's markers, before a
        restart or after it (the record keeps `ending`). An ending that failed is tried again
        here; the request waits up to ENDING_WAIT_SECONDS, then is refused with Kafka's answer
        meanwhile, CONCURRENT_TRANSACTIONS (retriable)."""
        if state.ending is None or state.txn is not None:
            return
        txn, action = state.ending
        if self._coordinator.metadata(txn) is None:  # ended on every participant (the usual case by now)
            state.ending = None
            return
        try:  # end_txn shields the ending: a wait given up does not cancel it
            await asyncio.wait_for(self._coordinator.end_txn(txn, action), ENDING_WAIT_SECONDS)
        except BrokerServiceError as exc:
            if exc.code != pb.TransactionNotFound:  # not found: ended already
                raise TxnRefused(ErrorCode.concurrent_transactions, exc.message) from None
        except Exception as exc:
            raise TxnRefused(ErrorCode.concurrent_transactions,
                             f"the last transaction's markers are not written yet: {exc}") from None
        if state.ending == (txn, action):
            state.ending = None

    async def add_partitions(self, state: KafkaTxn, partitions: list[tuple[str, int, str]]) -> None:
        """(Kafka topic, partition, its Pulsar name): participants of the transaction, durable
        when this returns. The coordinator's record and the id's go in the log's next group
        commit, which other transactions share; until it is durable a partition takes no
        transactional records (has_partition)."""
        await self._previous_ended(state)
        opened = self._open(state)
        known = set(state.partitions)
        new = list(dict.fromkeys((topic, index) for topic, index, _ in partitions if (topic, index) not in known))
        with self._coordinator.log.together():  # both records in one commit
            try:
                saving = self._coordinator.register_partitions(state.txn,  # type: ignore[arg-type]
                                                               [name for _, _, name in partitions])
            except BrokerServiceError as exc:
                raise TxnRefused(ErrorCode.invalid_txn_state if exc.code != pb.NotAllowedError else
                                 ErrorCode.invalid_request, exc.message) from None
            saved = None
            if new or opened:
                state.partitions += new
                state.unsaved.update(new)
                saved = self._save_later(state)
        if saved is None:
            if saving is not None:
                await saving  # named by a request whose record is still on its way
            return
        try:
            await asyncio.gather(*(f for f in (saving, saved) if f is not None))
        except Exception as exc:  # neither record names them: the client adds them again
            log.warning("Kafka transaction %r: partitions not stored: %s", state.transactional_id, exc)
            state.partitions = [p for p in state.partitions if p not in new]
            raise TxnRefused(ErrorCode.kafka_storage_error, str(exc)) from None
        finally:
            state.unsaved.difference_update(new)

    def has_partition(self, state: KafkaTxn, topic: str, partition: int) -> bool:
        """Whether the transaction's records may go to the partition: added, and durably so."""
        key = (topic, partition)
        return state.txn is not None and key in state.partitions and key not in state.unsaved

    async def add_group(self, state: KafkaTxn, group: str) -> None:
        await self._previous_ended(state)
        if self._open(state) or group not in state.groups:
            if len(state.groups) >= MAX_GROUPS:
                raise TxnRefused(ErrorCode.invalid_request, f"a transaction spans at most {MAX_GROUPS} groups")
            state.groups.append(group)
            await self._stored(state)

    async def add_offsets(self, state: KafkaTxn, group: str, offsets: list[tuple[str, int, int, str | None]]) -> None:
        """Offsets for `group`, the group's once the transaction commits."""
        if state.txn is None or group not in state.groups:
            raise TxnRefused(ErrorCode.invalid_txn_state, f"group {group!r} was not added (AddOffsetsToTxn)")
        for topic, partition, offset, metadata in offsets:
            state.offsets[(group, topic, partition)] = (offset, metadata)
        if len(state.offsets) > MAX_OFFSETS:
            raise TxnRefused(ErrorCode.invalid_request, f"a transaction carries at most {MAX_OFFSETS} offsets")
        await self._stored(state)

    async def _stored(self, state: KafkaTxn) -> None:
        """The record in the next group commit, durable when this returns (KAFKA_STORAGE_ERROR if not)."""
        try:
            await self._save_later(state)
        except Exception as exc:
            raise TxnRefused(ErrorCode.kafka_storage_error, str(exc)) from None

    # -- EndTxn
    async def end(self, state: KafkaTxn, commit: bool) -> None:
        """Commit or abort, answered once the decision is durable and a commit's offsets are
        applied, as Kafka answers EndTxn once its log has the decision: the markers follow
        (readers wait for them at the last stable offset) and a restart writes them from the
        coordinator's record."""
        if state.txn is None:
            done = COMPLETE_COMMIT if commit else COMPLETE_ABORT
            if state.status in (EMPTY, done) or not commit:
                return  # nothing under way, or a retry of the end that came through
            raise TxnRefused(ErrorCode.invalid_txn_state, f"no transaction to commit (it is {state.status})")
        state.status = PREPARE_COMMIT if commit else PREPARE_ABORT
        await self._finish(state, markers=False)

    async def _finish(self, state: KafkaTxn, *, abort_open: bool = False, markers: bool = True) -> None:
        """End a decided transaction (and, with `abort_open`, abort one still open): the
        decision in the id's record and the coordinator's (one commit: both or neither), a
        commit's offsets applied once it is durable; with `markers`, the participants' end
        waited for too. The record says it ended in a later commit."""
        if state.txn is None or (state.status == ONGOING and not abort_open):
            return
        txn, commit = state.txn, state.status == PREPARE_COMMIT
        action = COMMIT if commit else ABORT
        try:
            with self._coordinator.log.together():
                saved = self._save_later(state)
                decided = self._coordinator.decide(txn, action)
            await asyncio.gather(saved, decided)
            if markers:
                await self._coordinator.end_txn(txn, action)
        except BrokerServiceError as exc:
            if exc.code == pb.TransactionConflict:  # it could only abort (a participant's record failed): it is
                state.ending = (txn, ABORT)         # aborted instead, its producer's next transaction after the markers
                self._ended(state, COMPLETE_ABORT)
                self._save_unwaited(state)
                raise TxnRefused(ErrorCode.invalid_txn_state, exc.message) from None
            # not found: ended already (a restart after the coordinator's end), or timed out while open
            if exc.code != pb.TransactionNotFound:
                raise TxnRefused(ErrorCode.invalid_txn_state, exc.message) from None
        except Exception as exc:  # the decision is not stored: the transaction stays open
            state.status = ONGOING
            raise TxnRefused(ErrorCode.kafka_storage_error, str(exc)) from None
        if commit:
            self._apply_offsets(state)
        log.debug("Kafka transaction %r (%s) %s with %d offsets", state.transactional_id, state.txn,
                  "committed" if commit else "aborted", len(state.offsets))
        self._ended(state, COMPLETE_COMMIT if commit else COMPLETE_ABORT)
        state.ending = None if markers else (txn, action)
        # Not waited for: until it is durable a restart finds the decision and ends the
        # transaction again, which changes nothing; the next write of the record includes it.
        self._save_unwaited(state)

    def _apply_offsets(self, state: KafkaTxn) -> None:
        topics = KafkaTopics(self._broker, state.namespace)
        for (group, topic, partition), (offset, metadata) in state.offsets.items():
            try:
                topics.log(topic, partition).commit_offset(group, offset, metadata)
            except Exception as exc:  # a partition deleted since has no offset to keep
                log.info("Kafka transaction %r: offset of %s on %s-%d not kept: %s", state.transactional_id,
                         group, topic, partition, exc)

    @staticmethod
    def _ended(state: KafkaTxn, status: str) -> None:
        state.status, state.txn, state.offsets = status, None, {}
        state.used = _now()

    async def recover(self) -> None:
        """After a restart, once the coordinator has read its log back: transactions decided
        before a crash are ended (the coordinator's end again changes nothing) and a commit's
        offsets applied."""
        try:
            for state in list(self.ids.values()):
                if state.status in (PREPARE_COMMIT, PREPARE_ABORT):
                    log.info("Kafka transaction %r (%s) decided before the restart: %s", state.transactional_id,
                             state.txn, state.status)
                    try:
                        await self._finish(state)
                    except TxnRefused as exc:
                        log.warning("Kafka transaction %r not ended after the restart: %s", state.transactional_id,
                                    exc)
        finally:
            self.ready = True

    def describe(self, state: KafkaTxn) -> KafkaTxn:
        """The state as it is now (a transaction the coordinator timed out is aborted)."""
        self._still_open(state)
        return state

