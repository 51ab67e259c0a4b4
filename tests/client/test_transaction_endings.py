"""magnetar.client: a transaction's commit or abort always ends, whatever happened to what
it sent: a producer closed with sends in flight, a consumer closed with transactional
acknowledgements pending, the broker killed (SIGKILL) with sends unanswered. It succeeds when
everything was answered, or raises an error saying what happened, within the operation
timeout; it never waits for a producer's send timeout. What it committed is checked with the
official client."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from standalone import Standalone
from transactional_brokers import TXN_ON, module_broker, read_all_official

from magnetar.client import aio, errors

OPERATION_TIMEOUT = 2.0
NEVER = 600.0
"""Far beyond any answer a live broker gives: an end waiting this long hangs."""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from module_broker(tmp_path_factory, "txn-endings")


def _topic() -> str:
    return f"persistent://public/default/endings-{uuid.uuid4().hex[:8]}"


def _client(url: str) -> aio.Client:
    return aio.Client(url, enable_transaction=True, operation_timeout_seconds=OPERATION_TIMEOUT)


@pytest.mark.parametrize("end", ["commit", "abort"])
@pytest.mark.parametrize("together", [False, True], ids=["close-then-end", "close-with-end"])
def test_a_producer_closed_with_sends_in_flight(shared, end, together):
    """Closing flushes: every send has its receipt, so a commit commits them all."""
    topic = _topic()
    sent = [f"m-{i}".encode() for i in range(300)]

    async def run() -> None:
        async with _client(shared.url) as client:
            producer = await client.create_producer(topic, send_timeout_millis=int(NEVER * 1000))
            txn = await client.new_transaction(timeout=60)
            for value in sent:
                producer.send_encoded_async(value, None, txn=txn)
            async with asyncio.timeout(NEVER / 10):
                if together:
                    await asyncio.gather(producer.close(), getattr(txn, end)())
                else:
                    await producer.close()
                    await getattr(txn, end)()
            assert txn.state == ("COMMITTED" if end == "commit" else "ABORTED")

    asyncio.run(run())
    assert read_all_official(shared.url, topic) == (sent if end == "commit" else [])


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_a_consumer_closed_with_transactional_acks_pending(shared, end):
    """Acknowledgements still on their way when the consumer closes hold nothing: a commit
    then aborts and says why, and the messages are the subscription's again; a commit that
    succeeds took every message. Never a commit that took nothing."""
    topic = _topic()
    count = 50
    sent = [f"m-{i}".encode() for i in range(count)]

    async def run() -> str:
        async with _client(shared.url) as client:
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic)
            for value in sent:
                producer.send_encoded_async(value, None)
            await producer.flush()
            txn = await client.new_transaction(timeout=60)
            for _ in range(count):
                consumer.acknowledge(await consumer.receive(), txn)  # not awaited: pending
            await consumer.close()
            async with asyncio.timeout(NEVER / 10):
                try:
                    await getattr(txn, end)()
                except errors.TransactionConflict as exc:
                    assert end == "commit" and "aborted" in str(exc) and "closed" in str(exc), exc
            return txn.state

    state = asyncio.run(run())
    official = pulsar.Client(shared.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        again = official.subscribe(topic, "sub")
        left = []
        while len(left) < count:
            try:
                left.append(again.receive(timeout_millis=300 if state == "COMMITTED" else 10_000).data())
            except pulsar.Timeout:
                break
    finally:
        official.close()
    assert (state, left) in (("COMMITTED", []), ("ABORTED", sent)), (state, len(left))


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_the_broker_killed_with_sends_unanswered(tmp_path: Path, end):
    """The sends never get a receipt (their send timeout is far away): the end gives up on
    them after the operation timeout and says so; a commit does not commit."""
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    topic = _topic()
    try:
        async def run() -> BaseException:
            async with _client(broker.url) as client:
                producer = await client.create_producer(topic, send_timeout_millis=int(NEVER * 1000))
                await producer.send(b"before")
                txn = await client.new_transaction(timeout=60)
                for i in range(100):
                    producer.send_encoded_async(f"m-{i}".encode(), None, txn=txn)
                broker.proc.kill()
                broker.proc.wait()
                with pytest.raises(errors.PulsarException) as raised:
                    async with asyncio.timeout(NEVER / 10):
                        await getattr(txn, end)()
                assert txn.state != ("COMMITTED" if end == "commit" else "ABORTED")
                return raised.value

        error = asyncio.run(run())
        if end == "commit":
            assert isinstance(error, errors.Timeout) and "not committed" in str(error)
            assert "within the operation timeout" in str(error) and "aborting it failed too" in str(error)
        else:  # the abort itself cannot reach the broker
            assert isinstance(error, errors.ConnectError | errors.NotConnected | errors.Timeout), error
        broker.restart()
        assert read_all_official(broker.url, topic) == [b"before"]
    finally:
        broker.stop()


def test_the_broker_killed_during_the_commit(tmp_path: Path):
    """Killed while the commit is on its way: the commit either succeeds or raises within the
    operation timeout, saying what happened; after the restart the transaction is whole or
    absent (the coordinator's log decides), never in part."""
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    topic = _topic()
    sent = [f"m-{i}".encode() for i in range(100)]
    try:
        async def run() -> BaseException | None:
            async with _client(broker.url) as client:
                producer = await client.create_producer(topic)
                txn = await client.new_transaction(timeout=5)
                for value in sent:
                    producer.send_encoded_async(value, None, txn=txn)
                await producer.flush()
                ending = asyncio.ensure_future(txn.commit())
                await asyncio.sleep(0)  # the commit's first step runs: END_TXN goes out
                broker.proc.kill()
                async with asyncio.timeout(NEVER / 10):
                    try:
                        await ending
                    except errors.PulsarException as exc:
                        return exc
                return None

        error = asyncio.run(run())
        if error is not None:
            assert isinstance(error, errors.NotConnected | errors.ConnectError | errors.Timeout), error
            assert "transaction" in str(error) and ("outcome is unknown" in str(error) or "connect" in str(error))
        broker.proc.wait()
        broker.restart()
        seen = read_all_official(broker.url, topic)
        assert seen in ([], sent) if error is not None else seen == sent, len(seen)
    finally:
        broker.stop()
