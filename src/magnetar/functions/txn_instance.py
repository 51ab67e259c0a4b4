"""EFFECTIVELY_ONCE on transactions (PIP-31): input messages are processed in transactions
(the messages received already, GROUP_MAX at most, in one) holding their outputs, what
`context.publish` sent while processing them and the acknowledgements of the inputs, so they
take effect together on commit and not at all on abort.

magnetar.functions.bootstrap runs this instance instead of the plain one when the worker's
broker runs the transaction coordinator (transactionCoordinatorEnabled) and the function asks
for EFFECTIVELY_ONCE. The official client has no transactions, so this one consumes and
produces with magnetar.client; the user's code still imports `pulsar` for the SDK.

What happens when something fails, message by message:
- process() raises (or its output does not serialize): the transaction aborts, a user
  exception is counted, the messages before it in the group are processed again and
  committed, then it is, after a pause (RETRY_FIRST, doubling to RETRY_MAX), before any later
  message: the instance keeps running.
- a send or an acknowledgement is refused, or the commit aborts: a system exception, and the
  group is processed again the same way, one message a transaction until one commits.
- an acknowledgement conflicts: the message was acknowledged already (delivered twice): the
  transaction aborts and the message is skipped.
- idle IDLE_MS with nothing in hand: the instance asks for its unacknowledged messages again.
- a transaction's end has an unknown outcome (the coordinator's answer was lost): the process
  ends; the next one starts from what the broker holds.
- the process dies with a transaction open: its id went to the worker (in the stats) before
  anything was done in it, and the next instance aborts it before subscribing, so the
  acknowledgement it held does not keep that message away until the transaction times out.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from magnetar.client import AuthenticationToken, Client, errors
from magnetar.client.aio.options import CLIENT_LOGGER
from magnetar.client.blocking import Transaction
from magnetar.functions.config import FunctionConfig
from magnetar.functions.context import InstanceContext
from magnetar.functions.instance import EXIT_RETRY_IN_ORDER, OUTPUT_PRODUCER, Instance, output_options
from magnetar.functions.instance import run as run_instance
from magnetar.functions.stats import InstanceStats

log = logging.getLogger("magnetar.functions.instance")
_T = TypeVar("_T")
RETRY_FIRST, RETRY_MAX = 0.1, 2.0
"""Seconds before a failed message is processed again, doubling while it keeps failing."""
GROUP_MAX = 50
"""Messages a transaction at most: those received already when the first one comes (a
transaction's log writes and markers cost about 30 ms, shared by its messages)."""
IDLE_MS = 5000
"""Waiting this long for a message with autoAck off, the instance asks for its unacknowledged
ones again (what process() left unacknowledged: the ack timeout is off)."""
COMMITTED_KEPT = 10_000
"""Messages committed last whose copies, sent again after an abort, are recognised and left
out (an older copy's acknowledgement conflicts, and it is skipped then)."""
GROUP_SECONDS = 0.1
"""A transaction takes no further message once its processing has lasted this long."""
TXN_OUTPUT_PRODUCER = {**OUTPUT_PRODUCER, "batching_max_publish_delay_ms": 10}
"""A transaction's outputs batched: its commit flushes the batch, so the delay never holds
them back, and a transaction's outputs are one entry rather than one each."""
TXN_TIMEOUT_SECONDS = 60
TIMEOUT_MARGIN_SECONDS = 5


def txn_timeout(config: FunctionConfig) -> int:
    """A transaction opens at the first publish of a process() call (or after it returns) and
    lasts until the commit: with --timeout-ms the watchdog ends a longer call, so a little
    more is enough; without, a minute. The broker aborts a transaction left open that long."""
    if config.timeoutMs:
        return math.ceil(config.timeoutMs / 1000) + TIMEOUT_MARGIN_SECONDS
    return TXN_TIMEOUT_SECONDS


class UnknownOutcome(Exception):
    """A transaction's end was asked for and its answer lost: committed or not, nobody here knows."""


class Transactions:
    """The instance's current transaction, opened when first needed, one at a time."""

    def __init__(self, client: Client, stats: InstanceStats, timeout: int) -> None:
        self.client = client
        self.stats = stats
        self.timeout = timeout
        self.current: Transaction | None = None
        self.acked: list[Any] = []
        """The ids of the messages acknowledged in the current transaction."""

    def get(self) -> Transaction:
        if self.current is None:
            txn = self.client.new_transaction(self.timeout)
            self.stats.on_transaction(txn.txn_id)  # before anything is done in it
            self.current = txn
        return self.current

    def acknowledge(self, consumer: Any, message: Any, wait: bool) -> None:
        """`message` (or its id) acknowledged in the current transaction; `wait`: until the
        broker holds it (so that a conflict is raised here)."""
        txn = self.get()
        if wait:
            consumer.acknowledge(message, txn)
        else:
            consumer.acknowledge_async(message, txn)
        self.acked.append(message.message_id() if hasattr(message, "message_id") else message)

    def commit(self) -> list[Any]:
        """The ids of the messages it acknowledged. Raises TransactionConflict when it aborted
        instead (a send or ack in it failed, or the broker had timed it out), UnknownOutcome
        when nobody can tell."""
        txn = self.current
        if txn is None:
            return []
        acked = self.acked
        try:
            txn.commit()
        except errors.TransactionConflict:  # aborted, as the client says
            self._ended()
            raise
        except errors.TransactionNotFound as error:  # timed out and aborted by the broker
            self._ended()
            raise errors.TransactionConflict(f"transaction {txn.txn_id} timed out ({error})") from error
        except errors.PulsarException as error:
            raise UnknownOutcome(f"the commit of transaction {txn.txn_id} has no known outcome: {error}") from error
        self._ended()
        return acked

    def abort(self) -> None:
        txn = self.current
        if txn is None:
            return
        try:
            txn.abort()
        except errors.TransactionNotFound:  # timed out: aborted already
            pass
        except errors.PulsarException as error:
            raise UnknownOutcome(f"the abort of transaction {txn.txn_id} has no known outcome: {error}") from error
        self._ended()

    def _ended(self) -> None:
        self.current = None
        self.acked = []
        self.stats.on_transaction(None)


class Recent:
    """The last `size` keys added, for membership tests."""

    def __init__(self, size: int) -> None:
        self._order: deque[Any] = deque()
        self._keys: set[Any] = set()
        self._size = size

    def add(self, keys: Iterable[Any]) -> None:
        for key in keys:
            self._keys.add(key)
            self._order.append(key)
            if len(self._order) > self._size:
                self._keys.discard(self._order.popleft())

    def __contains__(self, key: object) -> bool:
        return key in self._keys


class TxnContext(InstanceContext):
    """The SDK's Context, whose publish and ack go into the message's transaction."""

    transactions: Transactions

    def _send_options(self) -> dict[str, Any]:
        return {"txn": self.transactions.get()}

    def ack(self, msgid: Any, topic: str | None = None) -> None:
        self.transactions.acknowledge(self._consumer, msgid, wait=True)


class TxnInstance(Instance):
    context_class = TxnContext
    stop_errors = (*Instance.stop_errors, errors.AlreadyClosed, errors.Interrupted)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.transactions = Transactions(self.client, self.stats, txn_timeout(self.config))
        assert isinstance(self.context, TxnContext)
        self.context.transactions = self.transactions
        self.committed = Recent(COMMITTED_KEPT)

    @classmethod
    def connect(cls, handoff: dict[str, Any]) -> Any:
        """magnetar.client with transactions; the transaction a dead predecessor left open
        is aborted before anything subscribes."""
        credential = handoff.get("credential")
        logging.getLogger(CLIENT_LOGGER).setLevel(logging.WARNING)  # as the official client's Warn level
        client = Client(handoff["serviceUrl"], authentication=AuthenticationToken(credential) if credential else None,
                        enable_transaction=True)
        left = (handoff.get("carried") or {}).get("openTransaction")
        if left:
            abort_left(client, (left[0], left[1]))
        return client

    def _consumer_options(self) -> dict[str, Any]:
        """Without an ack timeout: a message it sent again would overtake the one being retried."""
        options = super()._consumer_options()
        options.pop("unacked_messages_timeout_ms", None)
        return options

    def _next(self) -> list[Any]:
        """A group of messages: the first waited for, then those received already (GROUP_MAX at most)."""
        first = self._received(IDLE_MS)
        while first is None:
            if not self.config.autoAck:
                # messages process() left unacknowledged come back so, as the ack timeout
                # brings them back elsewhere (what was committed meanwhile is not resent)
                self.consumer.redeliver_unacknowledged_messages()
            first = self._received(IDLE_MS)
        group = [first]
        while len(group) < GROUP_MAX and (message := self._received(0)) is not None:
            group.append(message)
        return group

    def _received(self, timeout_ms: int) -> Any:
        try:
            return self.consumer.receive(timeout_ms)
        except errors.Timeout:
            return None

    def handle(self, group: list[Any]) -> None:  # type: ignore[override]
        """Until every message of `group` is committed (or found acknowledged before): one
        transaction for as many as possible; after a failure, the messages before the failed
        one in a transaction of their own, then the failed one alone, after a pause. What this
        instance committed already is left out: an abort makes the broker send what the
        transaction held again, while the instance retries those messages itself."""
        group = self._fresh(group)
        for _ in group:
            self.stats.on_received()
        limit, pause = len(group), RETRY_FIRST
        while group:
            done, failed = self._attempt(group[:limit])
            group = self._fresh(group[done:])
            if failed is None:
                limit, pause = len(group), RETRY_FIRST
            elif failed > 0:
                limit = failed
            else:
                time.sleep(pause)  # a pause before the retry, not a wait for anything
                limit, pause = 1, min(pause * 2, RETRY_MAX)

    def _fresh(self, group: list[Any]) -> list[Any]:
        """The messages of `group` neither committed nor met earlier in it (a copy the broker
        sent again may arrive beside the original)."""
        fresh, keys = [], set()
        for message in group:
            key = message.message_id()
            if key not in self.committed and key not in keys:
                keys.add(key)
                fresh.append(message)
        return fresh

    def _attempt(self, group: list[Any]) -> tuple[int, int | None]:
        """One transaction over the first messages of `group` (until GROUP_SECONDS have
        passed): (how many are done with, None) when it committed, (0, the index of the
        message that failed) when it aborted: 0 when which one is not known."""
        started = time.monotonic()
        latencies: list[float] = []
        for index, message in enumerate(group):
            topic = message.topic_name()
            start = time.monotonic()
            try:
                data = self._process(message, topic)
            except errors.TransactionConflict:  # context.ack of a message acknowledged before
                return self._skip(message, index)
            except Exception as error:
                log.exception("process() raised on message %s of %s; its transaction aborts",
                              message.message_id(), topic)
                self.stats.on_user_exception(error)
                self._settle(self.transactions.abort)
                return 0, index
            except BaseException as error:  # sys.exit() in user code: recorded, then the process ends
                self.stats.on_user_exception(error)
                self.stats.write(force=True)
                raise
            latencies.append((time.monotonic() - start) * 1000)
            try:
                self._store(message, topic, data, alone=len(group) == 1)
            except errors.TransactionConflict:
                return self._skip(message, index)
            except errors.PulsarException as error:
                self.stats.on_system_exception(f"message {message.message_id()} of {topic}: {error}")
                self._settle(self.transactions.abort)
                return 0, index
            if time.monotonic() - started > GROUP_SECONDS:
                break
        try:
            acked = self._settle(self.transactions.commit)
        except errors.TransactionConflict as error:
            self.stats.on_system_exception(f"{len(latencies)} message(s) from {group[0].message_id()}: {error}")
            return 0, 0
        for latency_ms in latencies:
            self.stats.on_processed(latency_ms)
        self.committed.add(acked)
        return len(latencies), None

    def _skip(self, message: Any, index: int) -> tuple[int, int | None]:
        """`message` was acknowledged already (a copy sent again): the transaction aborts, the
        messages before it are done again, and it is left out."""
        log.warning("message %s of %s was acknowledged already (delivered again): skipped", message.message_id(),
                    message.topic_name())
        self._settle(self.transactions.abort)
        self.committed.add([message.message_id()])
        return 0, index or None

    def _process(self, message: Any, topic: str) -> bytes | None:
        """process() on the message and its output serialized (None: nothing to send)."""
        value = self._input_serde(topic).deserialize(message.data())
        self.context.set_message(message, topic)
        with self.watchdog:
            output = self.function.call(value, self.context)
        return None if output is None or self.output_serde is None else bytes(self.output_serde.serialize(output))

    def _store(self, message: Any, topic: str, data: bytes | None, alone: bool) -> None:
        """The output and the input's acknowledgement, into the transaction; a message alone
        in its transaction waits for the acknowledgement, so a conflict names it."""
        if data is None and not self.config.autoAck:
            return
        txn = self.transactions.get()
        if data is not None:
            self._output().send_async(data, None, txn=txn, **output_options(message, topic))
        if self.config.autoAck:
            self.transactions.acknowledge(self.consumer, message, wait=alone)

    def _output(self) -> Any:
        producer = self.producers.get("")
        if producer is None:
            assert self.config.output is not None
            producer = self.producers[""] = self.client.create_producer(self.config.output, **TXN_OUTPUT_PRODUCER)
        return producer

    def _settle(self, end: Callable[[], _T]) -> _T:
        """End the transaction; when nobody can tell how it ended, end the process (its
        successor aborts it, and takes up from what the broker holds)."""
        try:
            return end()
        except UnknownOutcome as error:
            self.restart(EXIT_RETRY_IN_ORDER, UnknownOutcome(f"{error}; the instance restarts"), user=False)

    def stop(self) -> None:
        """Inside process(): its transaction is aborted before the process leaves."""
        if self.watchdog.busy and self.transactions.current is not None:
            self._abort_quietly()
        super().stop()

    def close(self) -> None:
        self._abort_quietly()
        super().close()

    def _abort_quietly(self) -> None:
        try:
            self.transactions.abort()
        except (UnknownOutcome, errors.PulsarException) as error:  # it times out on the broker
            log.warning("stopping: %s", error)


def abort_left(client: Client, txn_id: tuple[int, int]) -> None:
    """Abort what a predecessor left open; one that ended already is refused, which is fine."""
    try:
        client.resume_transaction(txn_id).abort()
    except (errors.TransactionNotFound, errors.InvalidTxnStatusError):
        return
    log.info("aborted transaction %s, left open by the instance before", txn_id)


def run(handoff: dict[str, Any], code: Path) -> int:
    return run_instance(handoff, code, TxnInstance)
