"""The brokers `peers.py` compares, behind one interface: start, produce, consume, stop.

Each adapter drives its broker the way that broker's users get their best durable
throughput from a Python client, with the same 100-byte payload and about the same number
of messages in flight (5,000), and says in its docstring what "batched", "ack each" and
"cumulative" mean for it. The comparison's fairness notes in docs/performance.md follow
these docstrings.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Protocol

import pulsar
from _broker_process import MAX_PENDING, PAYLOAD, official_client, produce, producer_options, start_standalone

READ_BATCH = 1000  # messages per read/fetch, and per cumulative ack
START_TIMEOUT = 30.0


class Peer(Protocol):
    name: str
    pid: int

    def produce(self, batched: bool, count: int) -> int: ...
    def consume(self, cumulative: bool, count: int) -> int: ...
    def stop(self) -> None: ...


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, what: str, proc: subprocess.Popen | None = None) -> None:
    """Poll `check` until it stops raising, within START_TIMEOUT."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            check()
            return
        except Exception as error:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what} exited with {proc.returncode}") from error
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready within {START_TIMEOUT}s") from error
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


# ---------------------------------------------------------------- magnetar
class Magnetar:
    """`magnetar standalone` with its defaults (receipt after the group's fsync), official client.

    Batched: the client's batches of up to 1000 messages / 10 ms. Both consumes read the
    batched topic with a receiver queue of 5,000; "ack each" is `acknowledge` per message
    (the client groups acks for up to 100 ms, its default), "cumulative" is
    `acknowledge_cumulative` every 1,000 messages.
    """

    name = "magnetar"

    def __init__(self, work: Path, config: list[str]) -> None:
        self.broker = start_standalone(work / "magnetar", config)
        self.pid = self.broker.proc.pid
        self.client = official_client(self.broker.url)

    def produce(self, batched: bool, count: int) -> int:
        topic = f"persistent://public/default/peers-{'batched' if batched else 'unbatched'}"
        producer = self.client.create_producer(topic, **producer_options(batched))
        result = produce(producer, count)
        producer.close()
        return result.sent

    def consume(self, cumulative: bool, count: int) -> int:
        consumer = self.client.subscribe("persistent://public/default/peers-batched",
                                         "cumulative" if cumulative else "ack-each",
                                         consumer_type=pulsar.ConsumerType.Exclusive,
                                         initial_position=pulsar.InitialPosition.Earliest,
                                         receiver_queue_size=MAX_PENDING)
        got = 0
        while got < count:
            try:
                msg = consumer.receive(timeout_millis=10_000)
            except pulsar.Timeout:
                break
            got += 1
            if not cumulative:
                consumer.acknowledge(msg)
            elif got % READ_BATCH == 0 or got == count:
                consumer.acknowledge_cumulative(msg)
        consumer.close()  # sends the acks the client still groups, inside the measured time
        return got

    def stop(self) -> None:
        self.client.close()
        self.broker.stop()


# ---------------------------------------------------------------- redis streams
class Redis:
    """redis-server with the append-only file on, fsync `always` or `everysec`; streams.

    `always` writes and fsyncs the AOF once per event-loop pass, before that pass's replies
    go out (a group commit, like magnetar's); `everysec` replies first and fsyncs in the
    background once a second. Produce: one XADD per message, pipelined 5,000 at a time
    (redis has no client batching, so batched and unbatched are the same stream of
    commands). Consume: a group, XREADGROUP of 1,000 at a time pipelined with the acks of
    the previous read: "ack each" is one XACK per message, "cumulative" (redis has none) one
    XACK naming the read's 1,000 ids. redis-py parses replies with hiredis when installed
    (the `bench` extra has it), as a redis user after throughput would.
    """

    def __init__(self, work: Path, fsync: str) -> None:
        import redis  # noqa: PLC0415 (optional: the `bench` extra)

        self.name = f"redis-{fsync}"
        directory = work / self.name
        directory.mkdir()
        port = free_port()
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
             "--dir", str(directory), "--appendonly", "yes", "--appendfsync", fsync, "--save", "",
             "--protected-mode", "no", "--daemonize", "no", "--logfile", str(directory / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.client = redis.Redis(host="127.0.0.1", port=port)
        wait_until(self.client.ping, self.name, self.proc)

    def produce(self, batched: bool, count: int) -> int:
        key = f"peers-{'batched' if batched else 'unbatched'}"
        sent = 0
        while sent < count:
            pipe = self.client.pipeline(transaction=False)
            chunk = min(MAX_PENDING, count - sent)
            for _ in range(chunk):
                pipe.xadd(key, {"d": PAYLOAD})
            sent += len(pipe.execute())
        return sent

    def consume(self, cumulative: bool, count: int) -> int:
        key, group = "peers-batched", "cumulative" if cumulative else "ack-each"
        self.client.xgroup_create(key, group, id="0")
        got, unacked = 0, []
        while True:
            pipe = self.client.pipeline(transaction=False)
            self._ack(pipe, key, group, unacked, cumulative)
            if got < count:
                pipe.xreadgroup(group, "c", {key: ">"}, count=min(READ_BATCH, count - got))
            replies = pipe.execute()
            if got >= count:
                return got
            read = replies[-1]
            unacked = [entry_id for _stream, entries in read for entry_id, _fields in entries]
            if not unacked:
                return got
            got += len(unacked)

    @staticmethod
    def _ack(pipe, key: str, group: str, ids: list, cumulative: bool) -> None:
        if not ids:
            return
        if cumulative:
            pipe.xack(key, group, *ids)
        else:
            for entry_id in ids:
                pipe.xack(key, group, entry_id)

    def stop(self) -> None:
        self.client.close()
        stop_process(self.proc)


# ---------------------------------------------------------------- NATS JetStream
class Nats:
    """nats-server with JetStream on a file store; nats-py.

    nats-server 2.9 (Debian's) acknowledges a publish once the message is written to its
    file store, which it fsyncs in the background every 60 s (`sync_interval`, and
    `always`, only exist from 2.10): a weaker promise than a receipt after fsync. Produce:
    `publish_async` with 5,000 acks pending (no client batching in NATS, so batched and
    unbatched are the same). Consume: a durable pull consumer fetching 1,000 at a time;
    "ack each" is AckExplicit with one ack per message, "cumulative" is AckAll with one ack
    of the last message of each fetch.
    """

    name = "nats-jetstream"

    def __init__(self, work: Path) -> None:
        import nats  # noqa: PLC0415 (optional: the `bench` extra)

        directory = work / self.name
        directory.mkdir()
        port = free_port()
        self.proc = subprocess.Popen(
            [shutil.which("nats-server") or "nats-server", "-a", "127.0.0.1", "-p", str(port), "-js",
             "-sd", str(directory), "-l", str(directory / "nats.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.loop = asyncio.new_event_loop()
        wait_until(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close(), self.name, self.proc)
        self.nc = self.loop.run_until_complete(nats.connect(f"nats://127.0.0.1:{port}"))
        self.js = self.nc.jetstream(publish_async_max_pending=MAX_PENDING)
        self.loop.run_until_complete(self._streams())

    async def _streams(self) -> None:
        from nats.js.api import StorageType  # noqa: PLC0415

        for kind in ("batched", "unbatched"):
            await self.js.add_stream(name=f"PEERS_{kind.upper()}", subjects=[f"peers.{kind}"],
                                     storage=StorageType.FILE)

    def produce(self, batched: bool, count: int) -> int:
        return self.loop.run_until_complete(self._produce(f"peers.{'batched' if batched else 'unbatched'}", count))

    async def _produce(self, subject: str, count: int) -> int:
        futures = [await self.js.publish_async(subject, PAYLOAD) for _ in range(count)]
        await asyncio.wait_for(self.js.publish_async_completed(), 600)  # a lost ack must not hang the run
        return sum(1 for future in futures if future.exception() is None)

    def consume(self, cumulative: bool, count: int) -> int:
        return self.loop.run_until_complete(self._consume(cumulative, count))

    async def _consume(self, cumulative: bool, count: int) -> int:
        from nats.errors import TimeoutError as FetchTimeout  # noqa: PLC0415
        from nats.js.api import AckPolicy, ConsumerConfig  # noqa: PLC0415

        policy = AckPolicy.ALL if cumulative else AckPolicy.EXPLICIT
        name = "cumulative" if cumulative else "ack-each"
        sub = await self.js.pull_subscribe("peers.batched", durable=name,
                                           config=ConsumerConfig(ack_policy=policy, max_ack_pending=MAX_PENDING))
        got = 0
        while got < count:
            try:
                msgs = await sub.fetch(min(READ_BATCH, count - got), timeout=10)
            except FetchTimeout:
                break
            got += len(msgs)
            if cumulative:
                await msgs[-1].ack()
            else:
                for msg in msgs:
                    await msg.ack()
        await self.nc.flush()  # the acks still buffered, inside the measured time
        await sub.unsubscribe()
        return got

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(self.nc.close())
        self.loop.close()
        stop_process(self.proc)
