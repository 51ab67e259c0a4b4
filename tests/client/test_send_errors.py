"""A SEND_ERROR concerns one producer: the connection it shares stays up.

Real broker, real triggers: a terminated topic (TopicTerminatedError), a topic's maxMessageSize
policy (NotAllowedError) and a namespace that starts requiring encryption under a producer that
does not encrypt (MetadataError, which the producer answers by registering again). Each time, the
other producer and the consumer on the same connection go on as if nothing happened: same
connection object, every message received once, none redelivered. Only magnetar.client: the
official C++ client drops the whole connection on any SEND_ERROR but a checksum one.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from admin_http import http
from polling import wait_for_async

from magnetar.client import errors
from magnetar.client.aio import Client
from magnetar.client.enums import InitialPosition

COUNT = 300


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def admin(broker, method: str, path: str, body: bytes | None = None) -> None:
    status, _, answer = await asyncio.to_thread(http, method, f"{broker.admin_url}/admin/v2/{path}", body)
    assert status in (200, 204), (path, status, answer)


async def bystanders_then(client: Client, topic: str, trouble) -> None:
    """A producer and a consumer of `topic` on the connection `trouble` (a coroutine function
    taking that connection) makes another producer fail on: `trouble` runs while the producer
    has sends in flight; afterwards every message arrives once, and nothing was reconnected."""
    producer = await client.create_producer(topic, batching_enabled=False)
    consumer = await client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    conn = producer.conn
    assert conn is not None and consumer.conn is conn
    sends = [asyncio.ensure_future(producer.send(f"{i}".encode())) for i in range(COUNT // 2)]
    await trouble(conn)
    sends += [asyncio.ensure_future(producer.send(f"{i}".encode())) for i in range(COUNT // 2, COUNT)]
    await asyncio.gather(*sends)
    got = []
    for _ in range(COUNT):
        message = await consumer.receive(10_000)
        got.append((int(message.data()), message.redelivery_count()))
        consumer.acknowledge(message)
    assert got == [(i, 0) for i in range(COUNT)]
    assert not conn.closed and producer.conn is conn and consumer.conn is conn


def test_a_terminated_topic_fails_its_producer_only(shared_broker, topic):
    name = f"doomed-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with Client(shared_broker.service_url, operation_timeout_seconds=10) as client:
            doomed = await client.create_producer(f"persistent://public/default/{name}", batching_enabled=False)
            await doomed.send(b"before")

            async def trouble(conn):
                assert doomed.conn is conn
                # sends in flight while the topic is terminated: those the broker took have ids,
                # the rest fail with TopicTerminated, whether their SEND was refused or the
                # producer's return was
                racing = [asyncio.ensure_future(doomed.send(f"{i}".encode())) for i in range(COUNT)]
                await asyncio.sleep(0)
                await admin(shared_broker, "POST", f"persistent/public/default/{name}/terminate")
                racing += [asyncio.ensure_future(doomed.send(b"late")) for _ in range(10)]
                outcomes = await asyncio.gather(*racing, return_exceptions=True)
                stored = [o for o in outcomes if not isinstance(o, BaseException)]
                assert outcomes[len(stored):] and all(isinstance(o, errors.TopicTerminated)
                                                      for o in outcomes[len(stored):]), outcomes
                with pytest.raises(errors.TopicTerminated):  # refused here, without asking the broker
                    await doomed.send(b"later")

            await bystanders_then(client, topic, trouble)
            await doomed.close()

    run(scenario())


def test_a_refused_size_fails_that_send_and_the_producer_goes_on(shared_broker, topic):
    name = f"small-{uuid.uuid4().hex[:8]}"

    async def scenario():
        async with Client(shared_broker.service_url, operation_timeout_seconds=10) as client:
            limited = await client.create_producer(f"persistent://public/default/{name}", batching_enabled=False)
            await admin(shared_broker, "POST", f"persistent/public/default/{name}/maxMessageSize", b"1000")

            async def trouble(conn):
                big = asyncio.ensure_future(limited.send(b"x" * 2000))
                small = asyncio.ensure_future(limited.send(b"small"))
                with pytest.raises(errors.NotAllowedError):
                    await big
                assert (await small).entry_id() == 0
                assert limited.conn is conn

            await bystanders_then(client, topic, trouble)

    run(scenario())


def test_any_other_send_error_registers_that_producer_again(shared_broker, topic):
    namespace = f"public/sealed-{uuid.uuid4().hex[:8]}"

    async def scenario():
        await admin(shared_broker, "PUT", f"namespaces/{namespace}")
        async with Client(shared_broker.service_url, operation_timeout_seconds=10) as client:
            plain = await client.create_producer(f"persistent://{namespace}/plain", batching_enabled=False)

            async def trouble(conn):
                await admin(shared_broker, "POST", f"namespaces/{namespace}/encryptionRequired", b"true")
                refused = asyncio.ensure_future(plain.send(b"plain"))
                # MetadataError: the producer leaves the connection (only it) and comes back
                assert await wait_for_async(lambda: plain.conn is None, 10, interval=0.01)
                await admin(shared_broker, "POST", f"namespaces/{namespace}/encryptionRequired", b"false")
                assert (await refused).entry_id() == 0  # sent again once registered again
                assert plain.conn is conn

            await bystanders_then(client, topic, trouble)

    run(scenario())
