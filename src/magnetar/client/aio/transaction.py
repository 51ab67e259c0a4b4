"""Transactions (PIP-31) as the Java client has them: `client.new_transaction(timeout)`,
`producer.send(..., txn=txn)`, then `txn.commit()` or `txn.abort()`.

The coordinator is found as the Java client finds it: the partitions of the coordinator-assign
topic are the coordinators, each reached by a lookup and greeted with TC_CLIENT_CONNECT;
transactions go to them in turn. A transaction registers each partition it produces to
(ADD_PARTITION_TO_TXN) when its first message goes there, and commits only once every
message sent in it has its receipt and every registration its answer: one that failed makes
the commit abort instead.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from magnetar.client import errors
from magnetar.client.enums import Result
from magnetar.client.outgoing import Tally
from magnetar.wire import txn as wire_txn
from magnetar.wire.txn import ABORT, COMMIT, TxnId

if TYPE_CHECKING:
    from magnetar.client.aio.connection import Connection
    from magnetar.client.aio.context import ClientContext
    from magnetar.client.message_id import MessageId

SendCallback = Any
"""callable(result, message_id), or None"""

OPEN, COMMITTING, ABORTING, COMMITTED, ABORTED, ERROR = "OPEN", "COMMITTING", "ABORTING", "COMMITTED", "ABORTED", \
    "ERROR"


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


class Producer(Protocol):
    """What a transaction needs of a producer it sends through."""

    topic: str

    def flush_batch(self) -> None: ...


class CoordinatorClient:
    """The client's connections to the transaction coordinators."""

    def __init__(self, context: ClientContext) -> None:
        self._context = context
        self._coordinators: list[tuple[int, Connection | None]] = []
        self._turn = itertools.count()
        self._started: asyncio.Task[None] | None = None

    async def start(self) -> None:
        started = self._started
        if started is None:
            started = self._started = asyncio.get_running_loop().create_task(self._connect_all())
        if started.done():  # every transaction after the first: no shield to make
            started.result()
            return
        await asyncio.shield(started)

    async def _connect_all(self) -> None:
        lookup = self._context.lookup
        try:
            count = await lookup.partitions(wire_txn.COORDINATOR_ASSIGN_TOPIC)
        except errors.PulsarServerError as exc:  # TopicNotFound and the like: nobody serves it
            raise errors.TransactionCoordinatorNotFoundError(
                f"the broker runs no transaction coordinator (looking up {wire_txn.COORDINATOR_ASSIGN_TOPIC}: {exc})"
            ) from exc
        if count <= 0:
            raise errors.TransactionCoordinatorNotFoundError(
                f"{wire_txn.COORDINATOR_ASSIGN_TOPIC} has no partitions: the broker runs no transaction coordinator")
        self._coordinators = [(tc_id, None) for tc_id in range(count)]
        for tc_id in range(count):
            await self._connection(tc_id)

    async def _connection(self, tc_id: int) -> Connection:
        """The coordinator's connection, opened again (and greeted again) after it was lost."""
        conn = self._coordinators[tc_id][1]
        if conn is not None and not conn.closed:
            return conn
        topic = f"{wire_txn.COORDINATOR_ASSIGN_TOPIC}-partition-{tc_id}"
        logical, physical = await self._context.lookup.broker_for(topic)
        conn = await self._context.pool.get(logical, physical)
        await conn.request(lambda request_id: wire_txn.tc_client_connect(request_id, tc_id))
        self._coordinators[tc_id] = (tc_id, conn)
        return conn

    async def request(self, tc_id: int, build: Any) -> Any:
        conn = self._coordinators[tc_id][1]
        if conn is None or conn.closed:
            conn = await self._connection(tc_id)
        return await conn.request(build)

    @property
    def operation_timeout(self) -> float:
        return self._context.operation_timeout

    async def new_txn(self, timeout_seconds: int) -> TxnId:
        await self.start()
        tc_id = next(self._turn) % len(self._coordinators)
        answer = await self.request(tc_id, lambda request_id: wire_txn.new_txn(request_id, tc_id, timeout_seconds))
        return wire_txn.txn_id_of(answer.newTxnResponse)


class Transaction(Tally):
    """One transaction; `txn_id` is (most_bits, least_bits), the Java client's TxnID."""

    def __init__(self, coordinators: CoordinatorClient, txn_id: TxnId, timeout_seconds: int) -> None:
        self._coordinators = coordinators
        self.txn_id = txn_id
        self.timeout_seconds = timeout_seconds
        self.state = OPEN
        self._partitions: dict[tuple[str, ...], asyncio.Future[Any]] = {}
        """Registrations with the coordinator: partitions produced to, subscriptions acknowledged on."""
        self._sends: list[asyncio.Future[Any]] = []
        self._unanswered = 0
        """Messages sent with send_async in it whose answer has not come (see `tracked`)."""
        self._refused: Result | None = None
        self._all_answered: asyncio.Future[None] | None = None
        self._producers: list[Producer] = []
        """The producers that sent in the transaction: their batches are cut before it ends."""
        self._sending_through: Producer | None = None
        """The producer of the last message sent in it, while the transaction is open and the
        partition's registration has not failed: its next message needs no check."""

    def __repr__(self) -> str:
        return f"Transaction{self.txn_id} {self.state}"

    def _check_open(self) -> None:
        if self.state != OPEN:
            raise errors.InvalidTxnStatusError(f"transaction {self.txn_id} is {self.state}, not OPEN")

    def register_produced(self, producer: Producer) -> None:
        """ADD_PARTITION_TO_TXN, once per partition, sent without holding the message back for
        the answer (a round trip per transaction saved): magnetar's broker registers the
        partition itself when the first SEND of the transaction reaches it, before storing it,
        and the commit waits for the answer (a refusal makes it abort). The producer's batch
        is cut when the transaction ends, so the commit does not wait for its timer."""
        if producer is self._sending_through:
            return
        self._check_open()
        topic = producer.topic
        key = ("partition", topic)
        registered = self._partitions.get(key)
        if registered is None:
            txn = self.txn_id
            registered = self._partitions[key] = asyncio.ensure_future(self._coordinators.request(
                txn.most, lambda request_id: wire_txn.add_partition_to_txn(request_id, txn, [topic])))
            registered.add_done_callback(self._registration_answered)
            self._producers.append(producer)
        elif registered.done() and registered.exception() is not None:
            raise registered.exception()  # type: ignore[misc]
        self._sending_through = producer

    def _registration_answered(self, registered: asyncio.Future[Any]) -> None:
        """A refused registration makes the next message through any producer check again
        (and fail); the commit reports it."""
        if registered.cancelled() or registered.exception() is not None:
            self._sending_through = None

    async def register_acked(self, topic: str, subscription: str) -> None:
        """ADD_SUBSCRIPTION_TO_TXN, once per subscription: answered before an ACK goes there."""
        txn = self.txn_id
        await self._register(("subscription", topic, subscription),
                             lambda request_id: wire_txn.add_subscription_to_txn(request_id, txn, topic, subscription))

    async def _register(self, key: tuple[str, ...], build: Any) -> None:
        self._check_open()
        registered = self._partitions.get(key)
        if registered is None:
            registered = self._partitions[key] = asyncio.ensure_future(self._coordinators.request(self.txn_id.most,
                                                                                                  build))
        if registered.done():  # every message after the first: no wait, no shield made per message
            registered.result()
            return
        await asyncio.shield(registered)

    def track(self, sent: asyncio.Future[Any]) -> None:
        """A message sent or acknowledged in the transaction: the commit waits for its answer."""
        self._sends.append(sent)

    def tracked(self, callback: SendCallback) -> SendCallback:
        """The completion of a message sent with send_async in the transaction: counted until
        its answer, so that the commit waits for it without a future per message. Without a
        callback of the application's, the transaction itself is the completion: no object
        is made per message."""
        self._unanswered += 1
        if callback is None:
            return self

        def answered(result: Result, message_id: MessageId | None) -> None:
            self(result, message_id)
            callback(result, message_id)

        return answered

    def __call__(self, result: Result, _message_id: MessageId) -> None:
        """One message sent with send_async in it has its answer (see `tracked`)."""
        if result != Result.Ok and self._refused is None:
            self._refused = result
        self.answered(1)

    def answered(self, count: int) -> None:
        """`count` messages sent with send_async in it have their answers (a batch of them
        comes at once: see Tally)."""
        self._unanswered -= count
        if not self._unanswered and self._all_answered is not None and not self._all_answered.done():
            self._all_answered.set_result(None)

    def _cut_batches(self) -> None:
        for producer in self._producers:
            producer.flush_batch()

    async def commit(self) -> None:
        """Commit once every send, acknowledgement and registration in the transaction has its
        answer; if one failed, or one has none within the operation timeout (its connection
        lost, the broker gone), abort instead and raise why."""
        self._check_open()
        self.state = COMMITTING
        self._sending_through = None
        problem = await self._settled()
        if problem is not None:
            await self._abort_instead(problem)
        await self._end(COMMIT, COMMITTED)

    async def abort(self) -> None:
        self._check_open()
        self.state = ABORTING
        self._sending_through = None
        await self._settled()
        await self._end(ABORT, ABORTED)

    async def _settled(self) -> errors.PulsarException | None:
        """Cut the batches and wait for the answers the end depends on, one operation timeout
        at most: a send cut off from its broker is otherwise failed only by its producer's
        send timeout, and a producer reconnecting keeps it longer. Why the transaction cannot
        commit, or None."""
        self._cut_batches()
        if self._unanswered:
            self._all_answered = asyncio.get_running_loop().create_future()
        waits = [wait for wait in (*self._sends, *self._partitions.values(), self._all_answered)
                 if wait is not None and not wait.done()]
        if not waits:  # the usual commit after a flush: no wait (its timer and its turn of the loop) to make
            return self._outcome()
        timeout = self._coordinators.operation_timeout
        _done, pending = await asyncio.wait(waits, timeout=timeout)
        for late in pending:
            late.add_done_callback(_retrieved)
        if pending:
            return errors.Timeout(f"{len(pending)} of its {len(waits)} sends, acknowledgements and registrations "
                                  f"had no answer within the operation timeout ({timeout:g} s)")
        return self._outcome()

    def _outcome(self) -> errors.PulsarException | None:
        """Why the transaction cannot commit, its sends, acknowledgements and registrations all
        answered (None: it can)."""
        answered = [*self._sends, *self._partitions.values()]
        causes = ["cancelled" if outcome.cancelled() else outcome.exception() for outcome in answered]  # all retrieved
        failed = next((cause for cause in causes if cause is not None), None)
        return self._refusal() if failed is None else errors.TransactionConflict(
            f"a send or ack in it failed ({failed})")

    def _refusal(self) -> errors.PulsarException | None:
        """A message sent with send_async in it that failed (see `tracked`), or None."""
        if self._refused is None:
            return None
        return errors.TransactionConflict(f"a send in it failed ({self._refused.name})")

    async def _abort_instead(self, problem: errors.PulsarException) -> NoReturn:
        try:
            await self._end(ABORT, ABORTED)
        except errors.PulsarException as exc:
            raise type(problem)(f"transaction {self.txn_id} not committed: {problem}; aborting it failed too "
                                f"({exc}), so the coordinator aborts it once its timeout passes") from exc
        raise type(problem)(f"transaction {self.txn_id} aborted: {problem}")

    async def _end(self, action: int, final: str) -> None:
        txn = self.txn_id
        try:
            await self._coordinators.request(txn.most, lambda request_id: wire_txn.end_txn(request_id, txn, action))
        except (errors.NotConnected, errors.Timeout) as exc:  # the coordinator may have ended it: nobody knows
            self.state = ERROR
            raise type(exc)(f"transaction {txn}: {'commit' if action == COMMIT else 'abort'} not confirmed, its "
                            f"outcome is unknown ({exc})") from exc
        except BaseException:
            self.state = ERROR
            raise
        self.state = final
