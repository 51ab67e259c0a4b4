"""The asyncio API: await send, async for, and cancellation that leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from magnetar.client import errors
from magnetar.client.aio import Client
from magnetar.client.enums import ConsumerType, InitialPosition


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_send_receive_and_async_for(shared_broker, topic):
    async def scenario():
        async with Client(shared_broker.service_url, operation_timeout_seconds=10) as client:
            producer = await client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
            consumer = await client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
            ids = await asyncio.gather(*(producer.send(f"{i}".encode()) for i in range(50)))
            assert [i.batch_index() for i in ids[:3]] == [0, 1, 2]
            got = []
            async for msg in consumer:
                consumer.acknowledge(msg)
                got.append(int(msg.data()))
                if len(got) == 50:
                    break
            assert got == list(range(50))

    run(scenario())


def test_cancelled_receive_loses_no_message(shared_broker, topic):
    async def scenario():
        async with Client(shared_broker.service_url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe(topic, "sub", consumer_type=ConsumerType.Shared)
            producer = await client.create_producer(topic)
            for _ in range(20):  # cancel waiting receives, some right as a message arrives
                waiting = asyncio.ensure_future(consumer.receive())
                await asyncio.sleep(0)
                waiting.cancel()
            sends = [asyncio.ensure_future(producer.send(f"{i}".encode())) for i in range(10)]
            got = []
            for _ in range(10):
                waiting = asyncio.ensure_future(consumer.receive())
                await asyncio.sleep(0.001)
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    got.append(int((await waiting).data()))  # it won the race: a message, not lost
            await asyncio.gather(*sends)
            while len(got) < 10:
                got.append(int((await consumer.receive(5000)).data()))
            assert sorted(got) == list(range(10))
            with pytest.raises(errors.Timeout):
                await consumer.receive(200)
            assert not consumer.queue._waiters or all(w.done() for w in consumer.queue._waiters)

    run(scenario())


def test_cancelled_send_still_completes_the_rest(shared_broker, topic):
    async def scenario():
        async with Client(shared_broker.service_url, operation_timeout_seconds=10) as client:
            producer = await client.create_producer(topic)
            cancelled = asyncio.ensure_future(producer.send(b"cancelled"))
            await asyncio.sleep(0)
            cancelled.cancel()
            assert (await producer.send(b"after")).entry_id() >= 0
            await producer.flush()
            assert not producer._pending and producer._pending_messages == 0

    run(scenario())


def test_errors_carry_the_official_names(shared_broker, topic):
    async def scenario():
        async with Client(shared_broker.service_url, operation_timeout_seconds=5) as client:
            with pytest.raises(errors.InvalidTopicName) as refused:
                await client.create_producer("persistent://public/default/bad\nname")
            assert refused.value.result.name == "InvalidTopicName"
            consumer = await client.subscribe(topic, "sub")
            with pytest.raises(errors.ConsumerBusy):
                await client.subscribe(topic, "sub")
            await consumer.close()
            with pytest.raises(errors.AlreadyClosed):
                await consumer.receive()

    run(scenario())
