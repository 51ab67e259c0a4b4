"""Transactions at speed: batches of one transaction's messages, transactions in flight at
once on one producer, and a SIGKILL while they are (issue 46's throughput slice).

The producing side is magnetar.client (the official Python client has no transactions),
with batching on as the official client has it by default; consumers are both clients.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from standalone import Standalone
from transactional_brokers import consumer as open_consumer
from transactional_brokers import kill_while, read_until

import magnetar.client
from magnetar.client import aio
from magnetar.storage import SqliteMetadataStore

TXN_ON = "transactionCoordinatorEnabled=true"
CONSUMERS = ["official", "magnetar"]


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("txn-batched") / "data", [TXN_ON]).start()
    yield broker
    broker.stop()


def _topic(name: str) -> str:
    return f"persistent://public/default/txnb-{name}-{uuid.uuid4().hex[:8]}"


async def _produce(url: str, topic: str, plan: list[tuple[str, list[bytes]]], interleave: bool = True) -> None:
    """Each (action, values) of `plan` is a transaction on one batching producer, its sends
    interleaved with those of the next transaction (or each ended before the next one
    sends), then committed or aborted."""
    async with aio.Client(url, enable_transaction=True, operation_timeout_seconds=10) as client:
        producer = await client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
        if not interleave:
            for action, values in plan:
                txn = await client.new_transaction(timeout=30)
                for value in values:
                    producer.send_async(value, None, txn=txn)
                await (txn.commit() if action == "commit" else txn.abort())
            plan = []
        txns = [await client.new_transaction(timeout=30) for _ in plan]
        longest = max((len(values) for _, values in plan), default=0)
        for index in range(longest):  # one message of each transaction in turn: every one cuts the batch
            for txn, (_, values) in zip(txns, plan, strict=True):
                if index < len(values):
                    producer.send_async(values[index], None, txn=txn)
        for txn, (action, _) in zip(txns, plan, strict=True):
            await (txn.commit() if action == "commit" else txn.abort())
        producer.send_async(b"plain-after", None)
        await producer.flush()


@pytest.mark.parametrize("kind", CONSUMERS)
def test_a_transactions_batches_are_delivered_whole_on_commit_and_never_on_abort(txn_broker, kind):
    topic = _topic("batches")
    client, consumer = open_consumer(kind, txn_broker.url, topic, "s")
    try:
        committed = [f"c-{i}".encode() for i in range(40)]
        aborted = [f"a-{i}".encode() for i in range(40)]
        asyncio.run(_produce(txn_broker.url, topic, [("abort", aborted), ("commit", committed)], interleave=False))
        got = read_until(consumer, {*committed, b"plain-after"})
        assert [value for value, _ in got] == [*committed, b"plain-after"]
        # The batch timer is a minute: a commit that did not cut the batch would wait for it.
        assert all(mid.batch_index() >= 0 for _, mid in got[:-1]), "the transaction's messages were not batched"
    finally:
        client.close()


def test_one_producer_batches_each_transaction_apart(txn_broker):
    """Three transactions' messages sent in turn on one producer: each entry holds one
    transaction's messages, so aborting the middle one takes exactly its messages away."""
    topic = _topic("apart")
    client, consumer = open_consumer("official", txn_broker.url, topic, "s")
    try:
        plan = [(action, [f"{n}-{i}".encode() for i in range(5)]) for n, action in
                enumerate(["commit", "abort", "commit"])]
        asyncio.run(_produce(txn_broker.url, topic, plan))
        expected = [value for action, values in plan if action == "commit" for value in values]
        got = [value for value, _ in read_until(consumer, {*expected, b"plain-after"})]
        assert sorted(got[:-1]) == sorted(expected) and got[-1] == b"plain-after"
    finally:
        client.close()


async def _busy_producers(url: str, topics: list[str], outcomes: dict[int, tuple[str, int]],
                          stop: threading.Event, rng: random.Random) -> None:
    """Producers with transactions in flight at once, each spanning both topics, until the
    broker is gone: each transaction's end that was answered is noted in `outcomes` as
    ("commit" or "abort", its message count); one never answered is not there. Message i of
    transaction n (of c) is "n:i:c", on topic i % 2."""
    async with aio.Client(url, enable_transaction=True, operation_timeout_seconds=5) as client:
        producers = [[await client.create_producer(topic, batching_enabled=True, send_timeout_millis=2000)
                      for topic in topics]
                     for _ in range(4)]

        async def worker(pair: list) -> None:
            while not stop.is_set():
                txn = await client.new_transaction(timeout=3)
                number, count = txn.txn_id[1], rng.randint(1, 30)
                for i in range(count):
                    pair[i % 2].send_async(f"{number}:{i}:{count}".encode(), None, txn=txn)
                action = "commit" if rng.random() < 0.7 else "abort"
                await (txn.commit() if action == "commit" else txn.abort())
                outcomes[number] = (action, count)

        await asyncio.gather(*(worker(pair) for pair in producers), return_exceptions=True)


def _subscribe_both(kind: str, url: str, topics: list[str]):
    client, first = open_consumer(kind, url, topics[0], f"check-{kind}")
    return client, first, client.subscribe(topics[1], f"check-{kind}", initial_position=pulsar.InitialPosition.Earliest)


def _check_after_kill(consumers: tuple, outcomes: dict[int, tuple[str, int]], seed: int) -> None:
    client, first, second = consumers
    try:
        committed = {n: count for n, (action, count) in outcomes.items() if action == "commit"}
        values = [value for value, _ in read_until(first, {f"{n}:0:{c}".encode() for n, c in committed.items()},
                                                    quiet_ms=1500)]
        values += [value for value, _ in read_until(second, {f"{n}:1:{c}".encode() for n, c in committed.items()
                                                              if c > 1}, quiet_ms=500)]
    finally:
        client.close()
    assert len(values) == len(set(values)), f"a message delivered twice (seed {seed})"
    seen: dict[int, tuple[set[int], int]] = {}
    for value in values:
        number, index, count = map(int, value.decode().split(":"))
        seen.setdefault(number, (set(), count))[0].add(index)
    for number, (action, _count) in outcomes.items():
        if action == "abort":
            assert number not in seen, f"aborted transaction {number} delivered (seed {seed})"
        else:
            assert number in seen, f"committed transaction {number} lost (seed {seed})"
    for number, (indexes, count) in seen.items():
        assert indexes == set(range(count)), f"transaction {number} delivered in part (seed {seed})"


def test_sigkill_with_transactions_in_flight_leaves_each_whole_or_gone(tmp_path: Path):
    """SIGKILL at a random moment while batched transactions are being registered, stored,
    decided and marked: after the restart (and the open ones' timeouts), every transaction a
    commit was answered for is there whole, none an abort was answered for is there at all,
    and any other is either whole or gone."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    try:
        topics = [_topic("kill-a"), _topic("kill-b")]
        outcomes: dict[int, tuple[str, int]] = {}
        kill_while(broker, lambda stop: asyncio.run(_busy_producers(broker.url, topics, outcomes, stop, rng)), rng,
                   (0.5, 2.0))
        assert outcomes, f"no transaction ended before the kill (seed {seed})"
        every = [_subscribe_both(kind, broker.url, topics) for kind in CONSUMERS]  # all before any acknowledges
        for consumers in every:
            _check_after_kill(consumers, outcomes, seed)
    finally:
        broker.stop()


def _batch(url: str, topic: str, count: int) -> list[bytes]:
    """`count` messages published as one batch (the official client's default batching)."""
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
        values = [f"m{i}".encode() for i in range(count)]
        for value in values:
            producer.send_async(value, None)
        producer.flush()
    finally:
        client.close()
    return values


@pytest.mark.parametrize("kind", CONSUMERS)
def test_each_message_of_a_batch_acknowledged_in_its_own_transaction(txn_broker, kind):
    """A batch's messages acknowledged one a transaction (a consume-transform-produce loop):
    each transaction holds its message only, a second transaction cannot take one held, and
    after the commits and aborts exactly the aborted ones are delivered again."""
    topic = _topic("index-acks")
    values = _batch(txn_broker.url, topic, 6)
    with magnetar.client.Client(txn_broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
        consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        messages = [consumer.receive(10_000) for _ in values]
        assert all(message.message_id().batch_index() == i for i, message in enumerate(messages))
        txns = []
        for message in messages:
            txn = client.new_transaction(timeout=30)
            consumer.acknowledge(message, txn=txn)
            txns.append(txn)
        stranger = client.new_transaction(timeout=30)
        with pytest.raises(magnetar.client.errors.TransactionConflict):
            consumer.acknowledge(messages[2], txn=stranger)
        stranger.abort()
        for i, txn in enumerate(txns):
            txn.commit() if i % 2 else txn.abort()
        consumer.close()
    again_client, again = open_consumer(kind, txn_broker.url, topic, "s")
    try:
        assert sorted(value for value, _ in read_until(again, {b"m0", b"m2", b"m4"})) == [b"m0", b"m2", b"m4"]
    finally:
        again_client.close()


def test_batch_messages_held_at_a_sigkill_stay_held_until_the_transaction_times_out(tmp_path: Path):
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    try:
        topic = _topic("index-kill")
        _batch(broker.url, topic, 3)
        with magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            first = consumer.receive(10_000)
            committed = client.new_transaction(timeout=30)
            consumer.acknowledge(first, txn=committed)
            committed.commit()
            held_from = time.monotonic()
            held = client.new_transaction(timeout=3)
            consumer.acknowledge(consumer.receive(10_000), txn=held)  # m1, held when the broker dies
            broker.kill()
        broker.start()
        client, again = open_consumer("official", broker.url, topic, "s")
        try:
            got = _received_at(again, {b"m1", b"m2"})
            # m2 at once; m1 only once its transaction timed out (counted here from before the
            # broker began it), with the batch again: m2 with it (the official client
            # acknowledges a batch only when whole). A restart slower than the timeout (a loaded
            # machine) brings both at once: then there is nothing to tell apart.
            assert b"m2" in got and set(got) <= {b"m1", b"m2"}
            timed_out = held_from + 3
            assert got.get(b"m1", 0.0) >= timed_out or got[b"m2"] >= timed_out
        finally:
            client.close()
    finally:
        broker.stop()


def _received_at(consumer, expected: set[bytes]) -> dict[bytes, float]:
    """When (monotonic) each value was first received, acknowledging all, until every one of
    `expected` came and then nothing for 500 ms."""
    first: dict[bytes, float] = {}
    while True:
        try:
            message = consumer.receive(10_000 if not expected <= first.keys() else 500)
        except Exception:  # Timeout, in either client's spelling
            return first
        first.setdefault(message.data(), time.monotonic())
        consumer.acknowledge(message)


def test_a_restart_reads_the_buffers_snapshot_and_only_the_entries_after_it(tmp_path: Path):
    """With a snapshot every 4 transactions: after a SIGKILL the buffer is its last snapshot
    plus the few entries after it, and readers still get every committed message, no
    aborted one, and nothing of the transaction open at the kill until it times out."""
    broker = Standalone(tmp_path / "data", [TXN_ON, "transactionBufferSnapshotMaxTransactionCount=4"]).start()
    try:
        topic = _topic("snapshot")
        expected = []
        with magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
            producer = client.create_producer(topic)
            for n in range(10):
                txn = client.new_transaction(timeout=30)
                producer.send(f"t{n}".encode(), txn=txn)
                if n % 3 == 2:
                    txn.abort()
                else:
                    txn.commit()
                    expected.append(f"t{n}".encode())
            open_txn = client.new_transaction(timeout=3)
            producer.send(b"open at the kill", txn=open_txn)
            producer.send(b"plain")
            broker.kill()
        broker.start()
        every = [open_consumer(kind, broker.url, topic, f"s-{kind}") for kind in CONSUMERS]
        rebuilt = re.search(r"txnb-snapshot-\w+: transaction buffer rebuilt from a snapshot at \S+ and (\d+) entries",
                            broker.log())
        assert rebuilt is not None, "no snapshot read"
        assert int(rebuilt.group(1)) < 22  # of the 22 entries (messages, markers), only those after it
        for client, consumer in every:
            try:
                got = [value for value, _ in read_until(consumer, {*expected, b"plain"})]
                assert got == [*expected, b"plain"]
            finally:
                client.close()
    finally:
        broker.stop()


@pytest.mark.parametrize("kind", CONSUMERS)
def test_a_cumulative_acknowledgement_in_a_transaction_takes_effect_on_commit_only(txn_broker, kind):
    """Exclusive: a cumulative ACK in a transaction holds everything up to its message (in
    a batch: the batch's messages up to it); an abort gives it all back, a commit
    acknowledges exactly that; a Shared subscription is refused."""
    topic = _topic("cumulative")
    values = _batch(txn_broker.url, topic, 4) + _batch(txn_broker.url, topic, 4)  # two batches, m0..m3 twice
    with magnetar.client.Client(txn_broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        messages = [consumer.receive(10_000) for _ in values]
        aborted = client.new_transaction(timeout=30)
        consumer.acknowledge_cumulative(messages[5], txn=aborted)  # the first batch, and m0, m1 of the second
        aborted.abort()
        committed = client.new_transaction(timeout=30)
        consumer.acknowledge_cumulative(messages[5], txn=committed)
        committed.commit()
        consumer.close()
        shared = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared,
                                  initial_position=pulsar.InitialPosition.Earliest)
        refused = client.new_transaction(timeout=30)
        with pytest.raises(magnetar.client.errors.PulsarException):
            shared.acknowledge_cumulative(shared.receive(10_000), txn=refused)
        refused.abort()
    again_client, again = open_consumer(kind, txn_broker.url, topic, "s")
    try:
        assert [value for value, _ in read_until(again, {b"m2", b"m3"})] == [b"m2", b"m3"]
    finally:
        again_client.close()


def _forget_in_log(data_dir: Path, txn: tuple[int, int], partition: str | None) -> None:
    """The coordinator's record of `txn` as a crash could have left it while the record
    naming `partition` was on its way to the disk: without it (None: no record at all)."""
    store = SqliteMetadataStore(data_dir / "metadata.db")
    try:
        key = f"/transactions/coordinator/{txn[0]}/txn/{txn[1]:020d}"
        if partition is None:
            store.delete(key)
        else:
            record = json.loads(store.get(key))
            record["partitions"] = [name for name in record["partitions"] if name != partition]
            store.put(key, json.dumps(record).encode())
    finally:
        store.close()


def test_messages_stored_before_the_log_named_their_partition_are_aborted_after_a_sigkill(tmp_path: Path):
    """A transaction's messages are stored while the log records their partition: a SIGKILL
    between the two leaves messages of a transaction the log does not know, or knows without
    that partition (forged here, for transactions open at the kill chosen at random, by
    taking the partition, or the whole record, out of the log). After the restart none of
    them is ever delivered, none holds its topic back beyond its timeout, and a commit
    answered before the kill is there whole."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    data = tmp_path / "data"
    broker = Standalone(data, [TXN_ON]).start()
    try:
        topics = [_topic("unnamed-a"), _topic("unnamed-b")]
        with magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
            producers = [client.create_producer(topic, batching_enabled=True) for topic in topics]
            committed = client.new_transaction(timeout=30)
            for i in range(6):
                producers[i % 2].send_async(f"committed-{i}".encode(), None, txn=committed)
            committed.commit()
            forged: list[tuple[tuple[int, int], str | None]] = []
            losses = [None, *topics, *(rng.choice([None, *topics]) for _ in range(rng.randint(0, 3)))]
            rng.shuffle(losses)  # each kind of loss at least once
            for n, lost in enumerate(losses):
                txn = client.new_transaction(timeout=4)  # still open when the topics load again
                for i in range(rng.randint(2, 20)):
                    producers[i % 2].send_async(f"open-{n}-{i}".encode(), None, txn=txn)
                for producer in producers:
                    producer.flush()  # every receipt: each record names both topics, durably
                forged.append((txn.txn_id, lost))
            broker.kill()
        for txn_id, partition in forged:
            _forget_in_log(data, txn_id, partition)
        broker.start()
        plain = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            for topic in topics:
                plain.create_producer(topic).send(b"after")
        finally:
            plain.close()
        every = {kind: _subscribe_both(kind, broker.url, topics) for kind in CONSUMERS}  # all before any acknowledges
        for kind, (client, *consumers) in every.items():
            try:
                got = [value for consumer, parity in zip(consumers, (0, 1), strict=True) for value, _ in read_until(
                    consumer, {b"after", *(f"committed-{i}".encode() for i in range(parity, 6, 2))})]
            finally:
                client.close()
            assert sorted(got) == sorted([b"after", b"after", *(f"committed-{i}".encode() for i in range(6))]), \
                f"{kind}: {got} (seed {seed}, forged {forged})"
    finally:
        broker.stop()


async def _send_while_the_log_is_held(url: str, topic: str, data_dir: Path) -> tuple[bool, list[bytes]]:
    """A transaction's message sent while another process holds the metadata store's write
    lock (the transaction log cannot commit, the ledger can): whether its receipt came
    before the lock was let go, and the values a consumer then gets once it commits."""
    async with aio.Client(url, enable_transaction=True, operation_timeout_seconds=10) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        consumer = await client.subscribe(topic, "s")
        earlier = await client.new_transaction(timeout=30)  # the topic's first: its ledger property is set
        await producer.send(b"earlier", txn=earlier)
        await earlier.commit()
        txn = await client.new_transaction(timeout=30)
        holder = sqlite3.connect(data_dir / "metadata.db", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            sent = asyncio.ensure_future(producer.send(b"held", txn=txn))
            await asyncio.wait({sent}, timeout=0.5)  # the broker stores it meanwhile
            early = sent.done()
        finally:
            holder.close()
        await asyncio.wait_for(sent, 10)
        await txn.commit()
        values = []
        for _ in range(2):
            message = await asyncio.wait_for(consumer.receive(), 10)
            values.append(message.data())
            consumer.acknowledge(message)
        return early, values


def test_a_transactional_send_is_answered_only_once_the_log_names_its_partition(tmp_path: Path):
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    try:
        early, values = asyncio.run(_send_while_the_log_is_held(broker.url, _topic("held-log"), tmp_path / "data"))
        assert not early, "receipt sent before the transaction log named the partition"
        assert values == [b"earlier", b"held"]
    finally:
        broker.stop()


async def _commit_while_the_log_is_held(url: str, topic: str, data_dir: Path) -> tuple[str, list[bytes]]:
    """A commit asked for while another process holds the metadata store's write lock for
    longer than SQLite waits (its decision cannot be stored): how the commit failed, then the
    values a consumer gets once the lock is let go and the transaction is committed again
    through a handle resumed by its id."""
    async with aio.Client(url, enable_transaction=True, operation_timeout_seconds=20) as client:
        producer = await client.create_producer(topic, batching_enabled=False)
        consumer = await client.subscribe(topic, "s")
        txn = await client.new_transaction(timeout=60)
        await producer.send(b"held", txn=txn)
        holder = sqlite3.connect(data_dir / "metadata.db", isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(magnetar.client.errors.PulsarException) as failed:
                await txn.commit()
        finally:
            holder.close()
        await (await client.resume_transaction(txn.txn_id)).commit()  # the client's retry
        message = await asyncio.wait_for(consumer.receive(), 10)
        return str(failed.value), [message.data()]


def test_a_commit_whose_decision_cannot_be_stored_is_answered_with_the_error_and_can_be_retried(tmp_path: Path):
    """END_TXN is answered from a callback on the transaction's ending: a decision that could
    not be stored comes back as an error (not as a commit), and the transaction stays open."""
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    try:
        why, values = asyncio.run(_commit_while_the_log_is_held(broker.url, _topic("held-commit"),
                                                                tmp_path / "data"))
        assert "could not end the transaction" in why and "locked" in why, why
        assert values == [b"held"]
    finally:
        broker.stop()
