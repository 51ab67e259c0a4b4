"""magnetar.client: a transaction ended by a client other than the one that opened it
(`resume_transaction`, what the Spark sink's driver does), and `Reader.get_last_message_id`,
against a real broker with transactions; outputs read with the official client too."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from standalone import Standalone
from transactional_brokers import module_broker, read_all_official

import magnetar.client
from magnetar.client import MessageId, aio, errors
from magnetar.client.enums import Result


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from module_broker(tmp_path_factory, "txn-handles")


def _topic() -> str:
    return f"persistent://public/default/handles-{uuid.uuid4().hex[:8]}"


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
        assert read_all_official(broker.url, topic) == []
        handle = ender.resume_transaction(txn.txn_id)
        handle.commit() if action == "commit" else handle.abort()
        assert handle.state == ("COMMITTED" if action == "commit" else "ABORTED")
        expected = [f"m-{i}".encode() for i in range(5)] if action == "commit" else []
        assert read_all_official(broker.url, topic) == [*expected, b"plain"]
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
    """A message on `topic` and one that fails (the broker refuses it with NotAllowedError:
    non-persistent topics take no transactional messages; that SEND alone fails, as in the
    Java client), both with send_async in one transaction, then a commit once both are
    answered (the refused message waits in its batch long enough for its partition's
    registration to be answered first: the commit aborts for the message, not for a
    registration)."""
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
    assert sorted(results) == [Result.Ok, Result.NotAllowedError]  # each callback told
    assert read_all_official(broker.url, topic) == []


@pytest.mark.parametrize("action", ["commit", "abort"])
def test_acknowledge_async_is_held_by_the_transaction_the_commit_waits_for(broker, action):
    """Many acknowledgements in a transaction without waiting for each (acknowledge_async):
    the commit acknowledges them all, an abort gives them all back; a message acknowledged
    already makes its future fail and the commit abort."""
    topic = _topic()
    with magnetar.client.Client(broker.url, enable_transaction=True) as client:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "s", consumer_type=magnetar.client.ConsumerType.Failover,
                                    initial_position=magnetar.client.InitialPosition.Earliest)
        for i in range(20):
            producer.send(f"m-{i}".encode())
        messages = [consumer.receive(10_000) for _ in range(20)]
        txn = client.new_transaction(timeout=60)
        futures = [consumer.acknowledge_async(message, txn) for message in messages]
        txn.commit() if action == "commit" else txn.abort()
        assert all(future.result(10) is None for future in futures)
        consumer.close()
        again = client.subscribe(topic, "s", consumer_type=magnetar.client.ConsumerType.Failover)
        if action == "abort":
            assert [again.receive(10_000).data() for _ in range(20)] == [m.data() for m in messages]
            return
        producer.send(b"after")
        assert again.receive(10_000).data() == b"after"
        txn = client.new_transaction(timeout=60)
        refused = again.acknowledge_async(messages[0], txn)  # acknowledged by the commit already
        with pytest.raises(errors.TransactionConflict):
            txn.commit()
        with pytest.raises(errors.TransactionConflict):
            refused.result(10)
        txn = client.new_transaction(timeout=60)
        nonsense = again.acknowledge_async("not a message", txn)  # refused before anything is sent
        with pytest.raises(errors.TransactionConflict):
            txn.commit()
        assert nonsense.exception(10) is not None
