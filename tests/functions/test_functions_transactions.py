"""EFFECTIVELY_ONCE on transactions (issue 46): with transactionCoordinatorEnabled, an
instance processes each message in a transaction holding its output, its context.publish
messages and the input's acknowledgement. Inputs come from the official client (batching on)
and magnetar.client; output and side topics are read back whole."""

from __future__ import annotations

import json
import os
import random
import signal
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from fn_helpers import deploy, functions_admin, make_client, status, wait_consumers
from polling import wait_for
from procfs import function_instance
from standalone import Standalone

import magnetar.client
from magnetar.admin_client import AdminClient, FunctionsAdmin
from magnetar.admin_client.transactions import TransactionsAdmin

TXN = "transactionCoordinatorEnabled=true"


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("fn-txn") / "data", [TXN]).start()
    yield broker
    broker.stop()


def produce_both(url: str, topic: str, values: dict[str, list[str]]) -> None:
    """Each key's values in order: keys starting `o` with the official client (batching on,
    several keys a batch), the others with magnetar.client."""
    official = make_client(url)
    ours = magnetar.client.Client(url, operation_timeout_seconds=10)
    try:
        producers = {"o": official.create_producer(topic), "m": ours.create_producer(topic)}
        for key, sequence in values.items():
            for value in sequence:
                producers[key[0]].send_async(value.encode(), None, partition_key=key)
        for producer in producers.values():
            producer.flush()
    finally:
        official.close()
        ours.close()


def flow(broker: Standalone, name: str, class_name: str, count: int, picked_as: str, picks: int,
         partitions: int = 0, **config: Any) -> tuple[FunctionsAdmin, dict[str, list[str]], list[str], list[str]]:
    """`name` deployed EFFECTIVELY_ONCE from tests/functions/code (`<module>.<Class>`), its
    user config naming its side topic and `picks` inputs chosen at random (as `picked_as`),
    then `count` keyed inputs produced with both clients: (admin, inputs by key, all of them,
    the picked ones)."""
    rng = random.Random()
    admin = functions_admin(broker.admin_url)
    if partitions:
        admin.admin.create_partitioned_topic(f"{name}-in", partitions)
    values = keyed_inputs(rng, count)
    every = [value for sequence in values.values() for value in sequence]
    picked = rng.sample(every, picks)
    module = class_name.partition(".")[0]
    deploy(admin, name, f"{module}.py", class_name, inputs=[f"{name}-in"], output=f"{name}-out",
           processingGuarantees="EFFECTIVELY_ONCE", userConfig={"side": f"{name}-side", picked_as: picked}, **config)
    produce_both(broker.url, f"{name}-in", values)
    return admin, values, every, picked


def keyed_inputs(rng: random.Random, count: int) -> dict[str, list[str]]:
    keys = [f"{side}{i}" for side in "om" for i in range(5)]
    values: dict[str, list[str]] = defaultdict(list)
    for i in range(count):
        key = rng.choice(keys)
        values[key].append(f"{key}-{i}")
    return values


def read_all(url: str, topic: str, expected: int) -> list[pulsar.Message]:
    """Every message of `topic` from its start: `expected` of them, then whatever else is there."""
    client = make_client(url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = [reader.read_next(30000) for _ in range(expected)]
        while reader.has_message_available():
            got.append(reader.read_next(10000))
        return got
    finally:
        client.close()


def partitions(admin: AdminClient, topic: str) -> list[str]:
    return [f"{topic}-partition-{i}" for i in range(admin.partitions(topic))] or [topic]


def drained(admin: AdminClient, topic: str, subscription: str) -> bool:
    """No backlog left on any partition of `topic` for the subscription."""
    return all(admin.stats(name)["subscriptions"][subscription]["msgBacklog"] == 0
               for name in partitions(admin, topic))


def check_exactly_once(url: str, admin: AdminClient, name: str, values: dict[str, list[str]],
                       ordered: bool = True, sides: list[str] | None = None) -> None:
    """Once the input is drained: each input's output and side message (those of `sides`)
    exactly once, the outputs in order per key (`ordered`)."""
    every = [value for sequence in values.values() for value in sequence]
    sides = every if sides is None else sides
    assert wait_for(lambda: drained(admin, f"{name}-in", f"public/default/{name}"), timeout=60), \
        json.dumps({"status": status(FunctionsAdmin(admin), name)["instances"][0]["status"],
                    "open": TransactionsAdmin(admin).slow_transactions(0),
                    "inputs": {part: admin.stats(part)["subscriptions"] for part in partitions(admin, f"{name}-in")}})
    outputs = read_all(url, f"{name}-out", len(every))
    assert Counter(m.data().decode() for m in outputs) == Counter(f"out:{v}" for v in every)
    by_key: dict[str, list[str]] = defaultdict(list)
    for message in outputs:
        by_key[message.partition_key()].append(message.data().decode().removeprefix("out:"))
    assert not ordered or by_key == values, "in order per key"
    published = read_all(url, f"{name}-side", len(sides))
    assert Counter(m.data().decode() for m in published) == Counter(f"side:{v}" for v in sides), \
        "the publishes of a failed try aborted with it"


def test_failed_tries_abort_with_their_outputs_and_publishes(txn_broker: Standalone) -> None:
    """(a) and (c): the function raises on inputs chosen at random, the first time, after a
    context.publish; each input's output and side message are there exactly once, outputs in
    order per key, and the instance never restarted."""
    admin, values, every, fail = flow(txn_broker, "txa", "txn_flaky.TxnFlaky", 120, "fail", 12, partitions=2)
    check_exactly_once(txn_broker.url, admin.admin, "txa", values)
    assert wait_for(lambda: status(admin, "txa")["instances"][0]["status"]["numSuccessfullyProcessed"] == len(every))
    instance = status(admin, "txa")["instances"][0]["status"]
    assert instance["numUserExceptions"] == len(fail) and instance["numRestarts"] == 0
    # what an abort held, the broker sends again: copies of messages committed since are left out
    assert instance["numReceived"] == len(every) and instance["numSystemExceptions"] == 0


def instance_pid(broker: Standalone) -> int | None:
    assert broker.proc is not None
    return function_instance(broker.proc.pid)


def processed(admin: FunctionsAdmin, name: str) -> int:
    return status(admin, name)["instances"][0]["status"]["numSuccessfullyProcessed"]


def test_sigkills_of_instance_and_broker_lose_and_duplicate_nothing(brokers: list[Standalone],
                                                                    tmp_path: Path) -> None:
    """(b): the instance SIGKILLed at random points while inputs flow, then the broker: each
    input's output and side message exactly once after recovery."""
    rng = random.Random()
    data_dir = tmp_path / "data"
    broker = Standalone(data_dir, [TXN]).start()
    brokers.append(broker)
    admin = functions_admin(broker.admin_url)
    admin.admin.create_partitioned_topic("txb-in", 2)
    config = deploy(admin, "txb", "txn_flaky.py", "txn_flaky.TxnFlaky", inputs=["txb-in"], output="txb-out",
                    processingGuarantees="EFFECTIVELY_ONCE", timeoutMs=2000,
                    userConfig={"side": "txb-side", "fail": []})
    every: dict[str, list[str]] = defaultdict(list)
    for round_ in range(3):
        values = {key: [f"r{round_}-{v}" for v in sequence] for key, sequence in keyed_inputs(rng, 150).items()}
        for key, sequence in values.items():
            every[key] += sequence
        produce_both(broker.url, "txb-in", values)
        floor = processed(admin, "txb") + rng.randint(1, 100)
        assert wait_for(lambda floor=floor, admin=admin: processed(admin, "txb") >= floor, timeout=60)
        if round_ < 2:
            pid = instance_pid(broker)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            assert wait_for(lambda pid=pid, broker=broker: instance_pid(broker) not in (None, pid), timeout=30)
            wait_consumers(admin.admin, config, 1)
        else:
            broker.stop(signal.SIGKILL)
            broker = Standalone(data_dir, [TXN]).start()
            brokers.append(broker)
            admin = functions_admin(broker.admin_url)
            wait_consumers(admin.admin, config, 1)
    # not in order: a transaction open when the broker died holds its message until it times out
    check_exactly_once(broker.url, admin.admin, "txb", every, ordered=False)


def test_an_instance_dying_inside_process_leaves_nothing_of_that_try(txn_broker: Standalone) -> None:
    """context.ack and context.publish are in the message's transaction too: the function
    acknowledges, publishes, then SIGKILLs its own process on a first try; the next instance
    aborts what it left open and processes the input again, in order."""
    admin, values, _every, crash = flow(txn_broker, "txc", "txn_crashing.TxnCrashing", 40, "crash", 2, autoAck=False)
    check_exactly_once(txn_broker.url, admin.admin, "txc", values)
    assert status(admin, "txc")["instances"][0]["status"]["numRestarts"] == len(crash)


def test_an_idle_instance_asks_for_what_it_left_unacknowledged(txn_broker: Standalone) -> None:
    """With autoAck off, messages the function did not acknowledge come back once the
    instance has waited IDLE_MS with nothing to do (it asks for its unacknowledged messages
    again), and a copy of one it committed meanwhile is not processed again."""
    admin, values, every, ignore = flow(txn_broker, "txi", "txn_ignoring.TxnIgnoring", 30, "ignore", 3,
                                        autoAck=False)
    # an ignored input's first side message went out with the transaction that left it unacknowledged
    check_exactly_once(txn_broker.url, admin.admin, "txi", values, ordered=False, sides=[*every, *ignore])
    assert wait_for(lambda: processed(admin, "txi") == len(every) + len(ignore))


def test_an_update_inside_process_aborts_the_open_transaction(txn_broker: Standalone) -> None:
    """Stopped by an update while process() holds a transaction open (after a publish), the
    instance aborts it before it leaves (nobody would hand its id to the updated function's
    instance, and the broker would hold it a minute), and the updated one does the message
    again: one output, one side message."""
    admin = functions_admin(txn_broker.admin_url)
    side = "persistent://public/default/txr-side"
    deploy(admin, "txr", "txn_holding.py", "txn_holding.TxnHolding", inputs=["txr-in"], output="txr-out",
           processingGuarantees="EFFECTIVELY_ONCE", userConfig={"side": side, "hold_s": 2})
    transactions = TransactionsAdmin(admin.admin)

    def holding() -> bool:
        return any(side in meta["producedPartitions"] for meta in transactions.slow_transactions(0).values())

    client = make_client(txn_broker.url)
    try:
        client.create_producer("txr-in").send(b"x")
    finally:
        client.close()
    assert wait_for(holding, timeout=30)
    admin.update({"tenant": "public", "namespace": "default", "name": "txr",
                  "userConfig": {"side": side, "hold_s": 0}})
    assert wait_for(lambda: not holding(), timeout=10), "aborted on the way out, not timed out a minute later"
    assert [m.data() for m in read_all(txn_broker.url, "txr-out", 1)] == [b"x"]
    assert [m.data() for m in read_all(txn_broker.url, side, 1)] == [b"x"]
