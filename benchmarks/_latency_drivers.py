"""What `latency_bench.py` drives: an open-loop sender, and per broker a publisher and a consumer.

Every message carries its index and its scheduled send time (CLOCK_MONOTONIC, the same
clock in every process of this machine), so the consumer, in another process, measures
end to end from the schedule too. A consumer process prints one line when it is
subscribed and, at the end, one JSON line: the end-to-end latencies (ms) of the
measured messages.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HEADER = struct.Struct("<qq")  # index, scheduled send time (ns)
PAYLOAD_BYTES = 100
EARLY_NS = 100_000
"""A send goes out when its slot is this close (at most 0.1 ms early) rather than sleeping
for less: a sleep that short oversleeps, and lateness would be charged to the broker."""
IDLE_TIMEOUT_S = 20.0
"""A consumer that received nothing for this long gives up and reports what it has."""


def payload(index: int, scheduled_ns: int) -> bytes:
    return HEADER.pack(index, scheduled_ns).ljust(PAYLOAD_BYTES, b"x")


def scheduled_of(data: bytes) -> tuple[int, int]:
    return HEADER.unpack_from(data)


def open_loop(send: Callable[[int, int], None], rate: int, count: int) -> float:
    """Call send(index, scheduled_ns) for each message at `rate` per second, never waiting
    for an answer: a stall in the broker shows as latency, not as a slower send rate.
    Returns how late (ms) the latest send left after its slot (the sender's own lag)."""
    interval = 1e9 / rate
    start = time.monotonic_ns() + 5_000_000
    worst = 0
    for i in range(count):
        due = start + int(i * interval)
        ahead = due - time.monotonic_ns()
        if ahead > EARLY_NS:
            time.sleep((ahead - EARLY_NS / 2) / 1e9)
        send(i, due)
        worst = max(worst, time.monotonic_ns() - due)
    return worst / 1e6


def alternating_rounds(tmp: Path, labels: list[str], rounds: int) -> Iterator[tuple[int, str, Path]]:
    """(round, label, a fresh work dir) for every label of every round, the order reversed
    each round: what the machine's load does over a run falls on every label alike."""
    for round_no in range(rounds):
        for label in labels if round_no % 2 == 0 else labels[::-1]:
            work = tmp / f"{label}-{round_no}"
            work.mkdir()
            yield round_no, label, work


PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p99.9", 0.999))


def summary(values: list[float]) -> dict[str, float | int]:
    """Count, percentiles and max of latencies (ms)."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    out: dict[str, float | int] = {"count": len(ordered)}
    for name, q in PERCENTILES:
        out[name] = round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)
    out["max"] = round(ordered[-1], 3)
    return out


class Latencies:
    """Publish latencies (ms) of the measured messages, appended from any thread."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.values: list[float] = []
        self.answered = 0
        self.failed = 0
        self.done = threading.Event()
        self.expected = 0
        self.sent_ns: dict[int, int] | None = None
        """With a trace: when each timed message's send call began, by index."""
        self.trace: list[tuple[int, int, int, int]] = []
        """With a trace: (index, scheduled, send began, receipt seen) in ns per measured message."""

    def record(self, index: int, scheduled_ns: int, ok: bool = True) -> None:
        now = time.monotonic_ns()
        if not ok:
            self.failed += 1
        elif index >= self.skip:
            self.values.append((now - scheduled_ns) / 1e6)
            if self.sent_ns is not None:
                self.trace.append((index, scheduled_ns, self.sent_ns.get(index, scheduled_ns), now))
        self.answered += 1
        if self.answered >= self.expected:
            self.done.set()


# ----------------------------------------------------------------- Pulsar clients (official, magnetar.client)
def pulsar_module(client: str):
    if client == "official":
        import pulsar  # noqa: PLC0415

        return pulsar
    import magnetar.client  # noqa: PLC0415

    return magnetar.client


def pulsar_client(module, url: str):
    if module.__name__ == "pulsar":
        return module.Client(url, operation_timeout_seconds=30, io_threads=1,
                             logger=module.ConsoleLogger(module.LoggerLevel.Error))
    return module.Client(url, operation_timeout_seconds=30)


def pulsar_publish(client, module, topic: str, batched: bool, every: int, rate: int, count: int,
                   skip: int, trace: bool = False) -> tuple[Latencies, float]:
    """send_async with a real callback on every `every`-th message (None on the others);
    the receipts of those with one are the publish latencies. With `trace`, each timed
    message's moments are kept too (Latencies.trace)."""
    options: dict = dict(batching_enabled=batched, block_if_queue_full=True, max_pending_messages=5000,
                         send_timeout_millis=60_000)
    producer = client.create_producer(topic, **options)
    latencies = Latencies(skip)
    latencies.expected = len(range(0, count, every))
    sent = latencies.sent_ns = {} if trace else None
    ok = module.Result.Ok

    def receipt(index: int, scheduled: int, result, _msg_id) -> None:
        latencies.record(index, scheduled, result == ok)

    def send(index: int, scheduled: int) -> None:
        callback = functools.partial(receipt, index, scheduled) if index % every == 0 else None
        if sent is not None and callback is not None:
            sent[index] = time.monotonic_ns()
        producer.send_async(payload(index, scheduled), callback)

    lag = open_loop(send, rate, count)
    producer.flush()
    latencies.done.wait(120)
    producer.close()
    return latencies, lag


def pulsar_consume(client_kind: str, url: str, topic: str, count: int, skip: int) -> list[float]:
    module = pulsar_module(client_kind)
    client = pulsar_client(module, url)
    consumer = client.subscribe(topic, "latency", consumer_type=module.ConsumerType.Exclusive)
    ready()
    values: list[float] = []
    got = 0
    while got < count:
        try:
            msg = consumer.receive(timeout_millis=int(IDLE_TIMEOUT_S * 1000))
        except Exception:  # the client's Timeout: report what arrived
            break
        now = time.monotonic_ns()
        index, scheduled = scheduled_of(msg.data())
        consumer.acknowledge(msg)
        got += 1
        if index >= skip:
            values.append((now - scheduled) / 1e6)
    consumer.close()
    client.close()
    return values


# ----------------------------------------------------------------- asyncio peers (redis, nats)
class AsyncSender:
    """An asyncio loop in a thread; the open loop hands it each send with call_soon_threadsafe,
    so the schedule keeps time.sleep's precision rather than the loop's millisecond timers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(120)

    def publish(self, publish_one, rate: int, count: int, skip: int) -> tuple[Latencies, float]:
        latencies = Latencies(skip)
        latencies.expected = count

        async def one(index: int, scheduled: int) -> None:
            try:
                await publish_one(payload(index, scheduled))
            except Exception:
                latencies.record(index, scheduled, ok=False)
            else:
                latencies.record(index, scheduled)

        def send(index: int, scheduled: int) -> None:
            self.loop.call_soon_threadsafe(self.loop.create_task, one(index, scheduled))

        lag = open_loop(send, rate, count)
        latencies.done.wait(120)
        return latencies, lag

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class RedisPipelinedPublisher:
    """XADD per message on one socket, pipelined: the open loop writes each command at its
    slot and a reader thread matches the replies (in order) to the sends, as a redis user
    after low latency pipelines. redis-py's asyncio client costs more CPU per command than
    the broker does, which would measure the client instead of redis."""

    def __init__(self, url: str) -> None:
        import socket  # noqa: PLC0415

        host, port = url.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.in_flight: collections.deque[tuple[int, int]] = collections.deque()

    def publish(self, key: str, rate: int, count: int, skip: int) -> tuple[Latencies, float]:
        import hiredis  # noqa: PLC0415

        latencies = Latencies(skip)
        latencies.expected = count
        prefix = f"*5\r\n$4\r\nXADD\r\n${len(key)}\r\n{key}\r\n$1\r\n*\r\n$1\r\nd\r\n${PAYLOAD_BYTES}\r\n".encode()
        reader, in_flight = hiredis.Reader(), self.in_flight

        def read_replies() -> None:
            while latencies.answered < count:
                data = self.sock.recv(65536)
                if not data:
                    return
                reader.feed(data)
                while (reply := reader.gets()) is not False:
                    index, scheduled = in_flight.popleft()
                    latencies.record(index, scheduled, not isinstance(reply, hiredis.ReplyError))

        thread = threading.Thread(target=read_replies, daemon=True)
        thread.start()

        def send(index: int, scheduled: int) -> None:
            in_flight.append((index, scheduled))
            self.sock.sendall(prefix + payload(index, scheduled) + b"\r\n")

        lag = open_loop(send, rate, count)
        latencies.done.wait(120)
        return latencies, lag

    def close(self) -> None:
        self.sock.close()


def redis_consume(url: str, key: str, count: int, skip: int) -> list[float]:
    import redis  # noqa: PLC0415

    host, port = url.rsplit(":", 1)
    client = redis.Redis(host=host, port=int(port))
    ready()
    values: list[float] = []
    last, got = "0", 0
    while got < count:
        read = client.xread({key: last}, count=1000, block=int(IDLE_TIMEOUT_S * 1000))
        now = time.monotonic_ns()
        if not read:
            break
        for entry_id, fields in read[0][1]:
            index, scheduled = scheduled_of(fields[b"d"])
            last, got = entry_id, got + 1
            if index >= skip:
                values.append((now - scheduled) / 1e6)
    client.close()
    return values


def nats_consume(url: str, subject: str, count: int, skip: int) -> list[float]:
    return asyncio.run(_nats_consume(url, subject, count, skip))


async def _nats_consume(url: str, subject: str, count: int, skip: int) -> list[float]:
    import nats  # noqa: PLC0415

    nc = await nats.connect(url)
    values: list[float] = []
    got = 0
    done = asyncio.Event()

    async def on_message(msg) -> None:
        nonlocal got
        now = time.monotonic_ns()
        index, scheduled = scheduled_of(msg.data)
        got += 1
        if index >= skip:
            values.append((now - scheduled) / 1e6)
        if got >= count:
            done.set()

    await nc.jetstream().subscribe(subject, cb=on_message, ordered_consumer=True)
    ready()
    last = -1
    while not done.is_set() and last != got:  # ends early only when nothing arrived for a whole timeout
        last = got
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), IDLE_TIMEOUT_S)
    await nc.close()
    return values


def ready() -> None:
    print("ready", flush=True)


def consumer_main(spec: str) -> None:
    """The consumer process: `spec` is JSON {kind, url, topic, count, skip[, client]}."""
    args = json.loads(spec)
    kind, url, topic, count, skip = args["kind"], args["url"], args["topic"], args["count"], args["skip"]
    if kind == "pulsar":
        values = pulsar_consume(args["client"], url, topic, count, skip)
    elif kind == "redis":
        values = redis_consume(url, topic, count, skip)
    else:
        values = nats_consume(url, topic, count, skip)
    sys.stdout.write(json.dumps(values) + "\n")
    sys.stdout.flush()
