"""Many transactions ending at once on one partition (issue 46's throughput slice): their
decisions share a log commit and their markers one append, and each still ends whole, as
decided, for readers reading meanwhile and after a SIGKILL and a restart.

The producing side is magnetar.client (the official Python client has no transactions);
consumers are both clients, subscribed before anything is produced.
"""

from __future__ import annotations

import asyncio
import random
import threading
import uuid
from pathlib import Path

import pytest
from standalone import Standalone
from transactional_brokers import TXN_ON, consumer, kill_while, read_until

from magnetar.client import aio

CONSUMERS = ["official", "magnetar"]


async def _end_together(url: str, topic: str, rng: random.Random, rounds: int,
                        outcomes: dict[int, tuple[str, int]], stop: threading.Event | None = None) -> None:
    """Rounds of 16 producers on `topic`, each with a transaction of 1-20 messages (value
    "n:i:c": message i of transaction n, of c), all flushed, then all ended at once (about
    70 % committed): their END_TXNs arrive together. An end that was answered is noted in
    `outcomes` as (action, count); with `stop`, rounds go on until it is set or the broker is gone."""
    async with aio.Client(url, enable_transaction=True, operation_timeout_seconds=5) as client:
        producers = [await client.create_producer(topic, batching_enabled=True, send_timeout_millis=2000)
                     for _ in range(16)]

        async def end(txn, action: str, count: int) -> None:
            await (txn.commit() if action == "commit" else txn.abort())
            outcomes[txn.txn_id[1]] = (action, count)

        done = 0
        while done < rounds or (stop is not None and not stop.is_set()):
            done += 1
            txns = [await client.new_transaction(timeout=3) for _ in producers]
            plan = [("commit" if rng.random() < 0.7 else "abort", rng.randint(1, 20)) for _ in producers]
            for producer, txn, (_action, count) in zip(producers, txns, plan, strict=True):
                for i in range(count):
                    producer.send_async(f"{txn.txn_id[1]}:{i}:{count}".encode(), None, txn=txn)
            await asyncio.gather(*(producer.flush() for producer in producers))
            results = await asyncio.gather(*(end(txn, action, count) for txn, (action, count)
                                             in zip(txns, plan, strict=True)), return_exceptions=True)
            if stop is not None and any(isinstance(result, Exception) for result in results):
                return  # the broker is gone


def _check(values: list[bytes], outcomes: dict[int, tuple[str, int]], seed: int, *, all_answered: bool) -> None:
    """Each transaction whole or absent: whole if its commit was answered, absent if its abort was
    (with `all_answered`, one that is not in `outcomes` was never produced)."""
    assert len(values) == len(set(values)), f"a message delivered twice (seed {seed})"
    seen: dict[int, tuple[set[int], int]] = {}
    for value in values:
        number, index, count = map(int, value.decode().split(":"))
        seen.setdefault(number, (set(), count))[0].add(index)
    for number, (indexes, count) in seen.items():
        assert indexes == set(range(count)), f"transaction {number} delivered in part (seed {seed})"
        assert not all_answered or number in outcomes, f"transaction {number} never ended (seed {seed})"
    for number, (action, _count) in outcomes.items():
        if action == "abort":
            assert number not in seen, f"aborted transaction {number} delivered (seed {seed})"
        else:
            assert number in seen, f"committed transaction {number} not delivered (seed {seed})"


def _committed_values(outcomes: dict[int, tuple[str, int]]) -> set[bytes]:
    return {f"{n}:{i}:{c}".encode() for n, (action, c) in outcomes.items() if action == "commit" for i in range(c)}


@pytest.mark.parametrize("snapshots", [[], ["transactionBufferSnapshotMaxTransactionCount=1"]],
                         ids=["default", "snapshot-at-each-end"])
def test_transactions_ended_together_are_each_whole_as_decided_before_and_after_a_restart(tmp_path: Path,
                                                                                         snapshots: list[str]):
    """With a buffer snapshot taken at each end, one is taken while the other markers of the
    append are durable and not yet ended: it must not claim them (a restart reads neither the
    markers before a snapshot's position nor a transaction ended since as anything but open)."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    topic = f"persistent://public/default/txnm-{uuid.uuid4().hex[:8]}"
    broker = Standalone(tmp_path / "data", [TXN_ON, *snapshots]).start()
    try:
        outcomes: dict[int, tuple[str, int]] = {}
        producing = threading.Thread(target=lambda: asyncio.run(_end_together(broker.url, topic, rng, 3, outcomes)))
        readers = _readers(broker.url, topic, "live")
        producing.start()  # dispatched to them meanwhile
        producing.join(60)
        assert {action for action, _ in outcomes.values()} == {"commit", "abort"}, seed
        _check_each(readers, outcomes, seed)
        broker.kill()  # the markers are all the buffer has to go by: it is rebuilt from them
        broker.start()
        _check_each(_readers(broker.url, topic, "after"), outcomes, seed)  # both subscribed before either acknowledges
    finally:
        broker.stop()


def _readers(url: str, topic: str, prefix: str) -> list[tuple]:
    return [consumer(kind, url, topic, f"{prefix}-{kind}") for kind in CONSUMERS]


def _check_each(readers: list[tuple], outcomes: dict[int, tuple[str, int]], seed: int) -> None:
    try:
        for _client, reader in readers:
            _check([value for value, _ in read_until(reader, _committed_values(outcomes), 500)], outcomes, seed,
                   all_answered=True)
    finally:
        for client, _ in readers:
            client.close()


@pytest.mark.parametrize("kind", CONSUMERS)
def test_sigkill_while_transactions_end_together_leaves_each_whole_or_gone(tmp_path: Path, kind: str):
    """SIGKILL at a random moment while rounds of transactions end at once: after the restart
    (and the open ones' timeouts), every answered commit is there whole, no answered abort is
    there at all, and any other transaction is whole or gone."""
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    topic = f"persistent://public/default/txnk-{uuid.uuid4().hex[:8]}"
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    try:
        outcomes: dict[int, tuple[str, int]] = {}
        kill_while(broker, lambda stop: asyncio.run(_end_together(broker.url, topic, rng, 1, outcomes, stop)), rng,
                   (0.3, 1.5))
        assert outcomes, f"no transaction ended before the kill (seed {seed})"
        client, reader = consumer(kind, broker.url, topic, "after")
        try:
            _check([value for value, _ in read_until(reader, _committed_values(outcomes), 1500)], outcomes, seed,
                   all_answered=False)
        finally:
            client.close()
    finally:
        broker.stop()
