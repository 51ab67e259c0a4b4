"""magnetar.client: a transaction ended by a client other than the one that opened it
(`resume_transaction`, what the Spark sink's driver does), and `Reader.get_last_message_id`,
against a real broker with transactions; outputs read with the official client too."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from standalone import Standalone

import magnetar.client
from magnetar.client import MessageId, aio, errors
from magnetar.client.enums import Result


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("txn-handles") / "data", ["transactionCoordinatorEnabled=true"]).start()
    yield broker
    broker.stop()


def _topic() -> str:
    return f"persistent://public/default/handles-{uuid.uuid4().hex[:8]}"


def _read_all_official(url: str, topic: str) -> list[bytes]:
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(10_000).data())
        return got
    finally:
        client.close()


@pytest.mark.parametrize("action", ["commit", "abort"])
def test_a_transaction_is_ended_by_another_client_by_its_id(broker, action):
    topic = _topic()
    with magnetar.client.Client(broker.url, enable_transaction=True) as opener, \
            magnetar.client.Client(broker.url, enable_transaction=True) as ender:
        producer = opener.create_producer(topic)
        txn = opener.new_transaction(timeout=60)
        for i in range(5):
            producer.send(f"m-{i}".encode(), txn=txn)
        producer.send(b"plain")  # behind the open transaction: held until it ends
        assert _read_all_official(broker.url, topic) == []
        handle = ender.resume_transaction(txn.txn_id)
        handle.commit() if action == "commit" else handle.abort()
        assert handle.state == ("COMMITTED" if action == "commit" else "ABORTED")
        expected = [f"m-{i}".encode() for i in range(5)] if action == "commit" else []
        assert _read_all_official(broker.url, topic) == [*expected, b"plain"]
        with pytest.raises(errors.TransactionNotFound):  # ended: the coordinator forgot it
            ender.resume_transaction(txn.txn_id).commit()


def test_resuming_needs_transactions_enabled_and_an_unknown_id_is_not_found(broker):
    with magnetar.client.Client(broker.url) as plain, pytest.raises(errors.InvalidConfiguration):
        plain.resume_transaction((0, 1))
    with magnetar.client.Client(broker.url, enable_transaction=True) as client, \
            pytest.raises(errors.TransactionNotFound):
        client.resume_transaction((0, 987_654)).abort()


def test_reader_last_message_id_names_the_last_message(broker):
    topic = _topic()
    with magnetar.client.Client(broker.url) as client:
        reader = client.create_reader(topic, MessageId.earliest)
        assert reader.get_last_message_id().entry_id() < 0  # nothing yet
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [producer.send(f"r-{i}".encode()) for i in range(3)]
        last = reader.get_last_message_id()
        assert (last.ledger_id(), last.entry_id()) == (sent[-1].ledger_id(), sent[-1].entry_id())
        tail = client.create_reader(topic, last, start_message_id_inclusive=True)
        assert tail.read_next(10_000).data() == b"r-2"
        assert not tail.has_message_available()


async def _send_one_refused(url: str, topic: str) -> list[Result]:
    """A message on `topic` and one that fails (the broker refuses it: non-persistent topics
    take no transactional messages; the client sends it again until its send timeout), both
    with send_async in one transaction, then a commit once both are answered (the refused
    message waits in its batch long enough for its partition's registration to be answered
    first: the commit aborts for the message, not for a registration lost with the
    connection)."""
    async with aio.Client(url, enable_transaction=True, operation_timeout_seconds=10) as client:
        kept = await client.create_producer(topic)
        refused = await client.create_producer(f"non-persistent://public/default/refused-{uuid.uuid4().hex[:8]}",
                                               send_timeout_millis=1000, batching_enabled=True,
                                               batching_max_publish_delay_ms=300)
        txn = await client.new_transaction(timeout=60)
        results: list[Result] = []
        both = asyncio.get_running_loop().create_future()

        def answered(result: Result, _id: object) -> None:
            results.append(result)
            if len(results) == 2:
                both.set_result(None)

        for producer in (kept, refused):
            producer.send_async(b"m", answered, txn=txn)
        await asyncio.wait_for(both, 10)  # the registrations answered long before
        with pytest.raises(errors.TransactionConflict):
            await txn.commit()
        assert txn.state == "ABORTED"
        return results


def test_a_commit_after_a_refused_send_async_aborts_instead(broker):
    topic = _topic()
    results = asyncio.run(_send_one_refused(broker.url, topic))
    assert sorted(results) == [Result.Ok, Result.Timeout]  # each callback told
    assert _read_all_official(broker.url, topic) == []
