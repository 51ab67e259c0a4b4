"""The exactly-once sink's second phase: Spark's commit or abort of a (micro-)batch ends the
transactions its tasks opened.

With `.option("exactlyOnce", "true")` each task sends its rows in one transaction of its own
and leaves it open; its commit message names it. Nothing of the batch is visible until the
driver commits, and a batch Spark aborts (a task failed for good) is aborted whole. The
transactions are ended by id: the coordinator knows a transaction by id and owner role, not
by the connection that opened it.

A stream must also survive its driver dying after the transactions were committed but before
Spark recorded the batch in its checkpoint: Spark then runs the micro-batch again, and its
rows must not be stored twice. So the driver writes a record of the batch (its id and its
transactions) to a topic of the query's own before committing any of them, and a commit finds
the last record first: when it names this batch, the batch was decided already; the driver
commits the recorded transactions (those it committed before are gone, and stay done) and
aborts the replay's. Records are single (unbatched) messages, so the last one is read by id.

A task killed outright leaves its transaction open, and readers of the partitions it wrote
to get nothing past it until it times out. So a stream's task names its transaction on a
second topic of the query's (`spark-sink-opened-<query>`) before its first row, and each
commit aborts every transaction named there since the last decision that is not the
batch's own or a decided one (the decision records how far it read).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from magnetar.client import Client, MessageId, errors
from magnetar.spark.write_options import WriteOptions

log = logging.getLogger(__name__)

COMMITS_TOPIC = "persistent://{namespace}/spark-sink-commits-{query}"
"""Where a stream's decided micro-batches are recorded: one topic per query, its last message the last decision."""
OPENED_TOPIC = "persistent://{namespace}/spark-sink-opened-{query}"
"""Where a stream's tasks name the transactions they open, before sending in them."""
MIN_TIME_LEFT_SECONDS = 10
"""A batch whose first transaction would time out sooner than this is aborted, not committed:
a decision must reach every transaction before the broker aborts one of them."""


@dataclass(slots=True)
class MagnetarCommitMessage(WriterCommitMessage):
    """What a task tells the driver: its row count, its producer name (deduplicated streams),
    and under exactlyOnce its open transaction, with the query and the transaction's deadline."""

    rows: int
    producer_name: str | None
    txn_id: tuple[int, int] | None = None
    query_id: str | None = None
    deadline: float = 0.0


def sink_client(options: WriteOptions) -> Client:
    """A client on service.url with the sink's security options (transactions when exactlyOnce)."""
    security = options.security
    extra = {"enable_transaction": True} if options.exactly_once else {}
    return Client(options.service_url, security.authentication, options.operation_timeout_seconds,
                  tls_trust_certs_file_path=security.tls_trust_certs_file_path,
                  tls_allow_insecure_connection=security.tls_allow_insecure_connection,
                  tls_validate_hostname=security.tls_validate_hostname, **extra)


def _opened(messages: Iterable[WriterCommitMessage | None]) -> list[MagnetarCommitMessage]:
    return [m for m in messages if isinstance(m, MagnetarCommitMessage) and m.txn_id is not None]


def abort_batch(options: WriteOptions, messages: Iterable[WriterCommitMessage | None]) -> None:
    """Abort every transaction the batch's tasks left open (a failed task aborted its own)."""
    opened = _opened(messages)
    if not opened:
        return
    client = sink_client(options)
    try:
        _end(client, [m.txn_id for m in opened if m.txn_id], commit=False)
    finally:
        client.close()


def commit_batch(options: WriteOptions, messages: Iterable[WriterCommitMessage | None], batch_id: int | None) -> None:
    """Commit the batch's transactions; a stream's micro-batch at most once (see the module docstring)."""
    opened = _opened(messages)
    if not opened:
        return
    txns = [m.txn_id for m in opened if m.txn_id]
    client = sink_client(options)
    try:
        if min(m.deadline for m in opened) - time.time() < MIN_TIME_LEFT_SECONDS:
            _end(client, txns, commit=False)
            raise RuntimeError("magnetar sink: the batch's transactions are about to time out, so it was aborted; "
                               "raise the 'transactionTimeoutSeconds' option above the time a batch takes")
        query = opened[0].query_id
        if batch_id is None or query is None:  # a batch write: nothing replays it
            _end(client, txns, commit=True)
            return
        _commit_micro_batch(client, options, query, batch_id, txns)
    finally:
        client.close()


def announce_opened(client: Client, options: WriteOptions, query: str, txn_id: tuple[int, int]) -> None:
    """A stream task's transaction, named before any row goes in it (see the module docstring)."""
    assert options.commit_namespace is not None  # checked when the stream writer was made
    _append(client, OPENED_TOPIC.format(namespace=options.commit_namespace, query=query), {"txn": txn_id})


def _append(client: Client, topic: str, record: dict) -> MessageId:
    producer = client.create_producer(topic, batching_enabled=False)
    try:
        return producer.send(json.dumps(record).encode())
    finally:
        producer.close()


def _commit_micro_batch(client: Client, options: WriteOptions, query: str, batch_id: int,
                        txns: list[tuple[int, int]]) -> None:
    namespace = options.commit_namespace
    assert namespace is not None  # checked when the stream writer was made
    topic = COMMITS_TOPIC.format(namespace=namespace, query=query)
    decided = last_record(client, topic)
    if decided is not None and decided["batch"] >= batch_id:
        log.info("magnetar sink: micro-batch %d of query %s was committed before; its replay is aborted",
                 batch_id, query)
        kept = [tuple(t) for t in decided["txns"]] if decided["batch"] == batch_id else []
        _end(client, kept, commit=True, ended_ok=True)
        _end(client, txns, commit=False)
        _sweep(client, namespace, query, decided, set(kept))
        return
    swept = _sweep(client, namespace, query, decided, set(txns))
    _append(client, topic, {"batch": batch_id, "txns": txns, "swept": swept})
    _end(client, txns, commit=True)


def _sweep(client: Client, namespace: str, query: str, decided: dict | None,
           keep: set[tuple[int, int]]) -> list[int] | None:
    """Abort the transactions tasks named since the last decision, but those in `keep`
    (left by attempts that died or lost); returns how far it read (ledger, entry)."""
    start = decided.get("swept") if decided else None
    at = MessageId.earliest if start is None else MessageId(ledger_id=start[0], entry_id=start[1])
    reader = client.create_reader(OPENED_TOPIC.format(namespace=namespace, query=query), at)
    stale: list[tuple[int, int]] = []
    try:
        while reader.has_message_available():
            message = reader.read_next(30_000)
            txn_id = tuple(json.loads(message.data())["txn"])
            if txn_id not in keep:
                stale.append(txn_id)  # type: ignore[arg-type]
            start = [message.message_id().ledger_id(), message.message_id().entry_id()]
    finally:
        reader.close()
    _end(client, stale, commit=False)
    return start


def last_record(client: Client, topic: str) -> dict | None:
    """The last decision recorded on `topic` (None: none yet)."""
    reader = client.create_reader(topic, MessageId.earliest)
    try:
        last = reader.get_last_message_id()
    finally:
        reader.close()
    if last.entry_id() < 0:
        return None
    reader = client.create_reader(topic, last, start_message_id_inclusive=True)
    try:
        record: dict = json.loads(reader.read_next(30_000).data())
    finally:
        reader.close()
    return record


def _end(client: Client, txns: Iterable[tuple[int, int]], commit: bool, ended_ok: bool = False) -> None:
    """Commit or abort each transaction; `ended_ok`: one ended already is taken as done (a
    replayed decision). An abort of one gone already (timed out, or its task aborted it) is done."""
    for txn_id in txns:
        txn = client.resume_transaction(txn_id)
        try:
            txn.commit() if commit else txn.abort()
        except (errors.TransactionNotFound, errors.InvalidTxnStatusError):
            if commit and not ended_ok:
                raise RuntimeError(f"magnetar sink: transaction {txn_id} timed out before Spark committed the "
                                   "batch; raise the 'transactionTimeoutSeconds' option") from None
