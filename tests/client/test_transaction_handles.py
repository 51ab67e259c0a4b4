"""magnetar.client: a transaction ended by a client other than the one that opened it
(`resume_transaction`, what the Spark sink's driver does), and `Reader.get_last_message_id`,
against a real broker with transactions; outputs read with the official client too."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from standalone import Standalone
from transactional_brokers import module_broker, read_all_official

import magnetar.client
from magnetar.client import MessageId, errors


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
