"""send_async of a batching producer as the blocking clients take it: batches cut when full
without waiting for the delay, order kept across plain messages and messages with options.

magnetar.client's facade holds a batching producer's plain messages in its inbox until the
batch is due (client.send_inbox); the official client batches in its own queue. Same
scenarios for both.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from admin_http import http

import magnetar.client

RECEIVE_MS = 10_000


class Receipts:
    """send_async callbacks, counted; `wait(n)` polls for n of them with a deadline."""

    def __init__(self) -> None:
        self.ids: list = []
        self.failures: list = []
        self.results: list = []
        """Every callback's result, in the order they came."""
        self._lock = threading.Lock()

    def callback(self, result, message_id) -> None:
        with self._lock:
            self.results.append(result)
            (self.ids if message_id is not None else self.failures).append((result, message_id))

    def wait(self, count: int, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.ids) + len(self.failures) >= count:
                return True
            time.sleep(0.01)
        return False


def test_a_full_batch_leaves_without_waiting_for_the_delay(api, topic):
    client = api.client()
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=10,
                                      batching_max_publish_delay_ms=600_000)
    receipts = Receipts()
    for i in range(25):
        producer.send_async(f"{i}".encode(), receipts.callback)
    assert receipts.wait(20), f"{len(receipts.ids)} receipts: full batches waited for the 10-minute delay"
    entries = sorted({(mid.ledger_id(), mid.entry_id()) for _, mid in receipts.ids})
    assert len(entries) == 2 and sorted(mid.batch_index() for _, mid in receipts.ids) == sorted(list(range(10)) * 2)
    assert not receipts.failures
    producer.flush()  # the last five, which wait for their batch
    assert receipts.wait(25) and len(receipts.ids) == 25


def test_plain_messages_and_messages_with_options_keep_their_order(api, topic):
    client = api.client()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=200)
    receipts = Receipts()
    expected = []
    for i in range(30):
        value = f"{i}".encode()
        if i % 7 == 3:
            producer.send_async(value, receipts.callback, properties={"i": str(i)})
        elif i % 11 == 5:
            producer.send_async(value, receipts.callback, partition_key=f"k{i}")
        elif i == 20:
            producer.send_async(value, receipts.callback, deliver_after=timedelta(milliseconds=1))
            continue  # delayed: delivered apart from the order of the others
        else:
            producer.send_async(value, receipts.callback)
        expected.append(value)
    last = producer.send(b"last")  # waits for its batch like the others
    assert receipts.wait(30) and not receipts.failures
    got = [consumer.receive(RECEIVE_MS) for _ in range(len(expected) + 2)]
    in_order = [m.data() for m in got if m.data() not in (b"20", b"last")]
    assert in_order == expected
    assert {m.data() for m in got} == {*expected, b"20", b"last"}
    assert max(mid for _, mid in receipts.ids) < last


def test_closing_the_client_tells_every_callback_what_became_of_its_message(api, topic):
    """Sends waiting for their batch are answered, none forgotten: magnetar.client sends them
    (its close flushes), the official client fails them with AlreadyClosed."""
    client = api.client()
    receipts = Receipts()
    send_async = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=600_000).send_async
    values = [f"{i}".encode() for i in range(5)]
    for value in values:
        send_async(value, receipts.callback)
    client.close()
    assert len(receipts.results) == 5  # answered by the close itself, in the order sent
    stored = [value for value, result in zip(values, receipts.results, strict=True) if result == api.module.Result.Ok]
    if api.name == "magnetar":
        assert stored == values
    reader = api.client().create_reader(topic, api.module.MessageId.earliest)
    assert [reader.read_next(RECEIVE_MS).data() for _ in stored] == stored
    assert not reader.has_message_available()


class _CountedWrites:
    """The connection's transport, its writes counted (any loop's transport: uvloop's
    attributes cannot be replaced)."""

    def __init__(self, transport, writes: list) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data) -> None:
        self._writes.append(len(data))
        self._transport.write(data)

    def writelines(self, frames) -> None:
        frames = list(frames)
        self._writes.append(sum(map(len, frames)))
        self._transport.writelines(frames)

    def __getattr__(self, name):
        return getattr(self._transport, name)


@pytest.mark.parametrize("partitions", [0, 3])
def test_a_burst_of_unbatched_sends_is_stored_in_order_with_a_receipt_each(api, topic, shared_broker, partitions):
    """send_async calls made faster than the client's I/O thread turns: each message is its
    own entry, in the order sent (on each partition). magnetar.client hands the burst over in
    one drain of its inbox, whose frames leave in one socket write (the I/O thread is held
    busy here while the burst is queued, so the whole of it is queued before the drain; the
    partitions' producers share the one broker's connection)."""
    if partitions:
        status, _, body = http("PUT", f"{shared_broker.admin_url}/admin/v2/persistent/public/default/"
                                      f"{topic.rsplit('/', 1)[1]}/partitions", str(partitions).encode())
        assert status in (200, 204), body
    client = api.client()
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(max(1, partitions)):
        producer.send(f"first{i}".encode())  # connected, so the burst meets ready producers
    writes = []
    if api.name == "magnetar":
        cores = producer._core.producers if partitions else [producer._core]
        (conn,) = {id(core.conn): core.conn for core in cores}.values()
        conn._transport = _CountedWrites(conn._transport, writes)
        busy, release = threading.Event(), threading.Event()
        client._io.loop.call_soon_threadsafe(lambda: (busy.set(), release.wait(10)))
        assert busy.wait(10)
    receipts = Receipts()
    values = [f"m{i}".encode() for i in range(60)]
    for value in values:
        producer.send_async(value, receipts.callback)
    if api.name == "magnetar":
        release.set()
    assert receipts.wait(60) and not receipts.failures
    ids = [mid for _, mid in receipts.ids]
    assert all(mid.batch_index() == -1 for mid in ids)
    assert len({(m.partition(), m.ledger_id(), m.entry_id()) for m in ids}) == 60
    got = [consumer.receive(RECEIVE_MS) for _ in range(60 + max(1, partitions))]
    by_partition: dict = {}
    for message in got:
        if not message.data().startswith(b"first"):
            by_partition.setdefault(message.topic_name(), []).append(message.data())
    assert sorted(v for vs in by_partition.values() for v in vs) == sorted(values)
    for received in by_partition.values():
        assert received == sorted(received, key=values.index)
    if api.name == "magnetar":
        assert len(writes) == 1, f"the burst went out in {len(writes)} socket writes"


class _PolledWrites(_CountedWrites):
    """Each write of the transport noted with how many times the loop had polled its sockets."""

    def __init__(self, transport, writes: list, polls: list[int]) -> None:
        super().__init__(transport, writes)
        self._polls = polls

    def write(self, data) -> None:
        self._writes.append(self._polls[0])
        self._transport.write(data)

    def writelines(self, frames) -> None:
        self._writes.append(self._polls[0])
        self._transport.writelines(list(frames))


def test_a_send_at_a_steady_rate_leaves_in_the_turn_that_hands_it_over(shared_broker, topic):
    """magnetar.client's facade: a send_async made while the I/O thread is idle is a drain of
    its own, and its frame leaves before the loop polls its sockets again, not a turn later
    (which cost a poll and a loop turn a message at a steady rate)."""
    client = magnetar.client.Client(shared_broker.service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"connected")
        loop = client._io.loop
        polls = [0]
        select = loop._selector.select

        def counted_select(timeout=None):
            polls[0] += 1
            return select(timeout)

        loop._selector.select = counted_select
        writes: list[int] = []
        conn = producer._core.conn
        conn._transport = _PolledWrites(conn._transport, writes, polls)
        drains: list[int] = []
        inbox = producer._inbox
        drain = inbox.drain

        def counted_drain():
            drains.append(polls[0])
            drain()

        inbox.drain = counted_drain
        for i in range(20):
            done = threading.Event()
            producer.send_async(b"m%d" % i, lambda _result, _id, done=done: done.set())
            assert done.wait(10)
        assert len(drains) == 20
        assert writes == drains
    finally:
        client.close()
