"""Key_Shared with batching, consumers joining and leaving, and every ack pattern.

Pulsar's rule (PersistentStickyKeyDispatcherMultipleConsumers): an entry goes whole to the
consumer that owns its sticky key (MessageMetadata ordering_key, else partition_key, else a
fixed key), so a Default batch of many keys follows its first message's key; delivery goes
on while consumers have permits; a key that moves to a consumer that joins goes to it only
once the consumer that had it acknowledged what it holds of that key (draining hashes,
PIP-379), so order per key holds and nothing else waits.

Each consumer here receives in a thread of its own, as an application does. A harness
that polls the consumers in turn with a timeout each is paced by the idle ones: when one
consumer owns the whole backlog (a Default batch routed by its first key) it gets one
message per timeout of the other, which looks like a stall at ~600 messages in 30 s but is
not one; with KeyBased batches, 20 keys of 100 messages split unevenly between two
consumers (900/1,100, 700/1,300) finish after the difference times the timeout: the 10 s
steps issue 29 reported. Stalls are measured in test_key_shared_churn.py.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

import pulsar
import pytest
from seeds import fresh_seed
from standalone import Standalone

KEY_SHARED = pulsar.ConsumerType.KeyShared
BATCHING = {
    "default": pulsar.BatchingType.Default,
    "key_based": pulsar.BatchingType.KeyBased,
}
#: Fixed seeds keep the run reproducible; one fresh seed per run widens the search. Set
#: MAGNETAR_KEY_SHARED_SEEDS=1,2,3 to replay the seeds a failure printed.
FIXED_SEEDS = [11, 23, 37]
DELIVERY_DEADLINE_S = 20.0
POLL_S = 0.02


def _seeds() -> list[int]:
    chosen = os.environ.get("MAGNETAR_KEY_SHARED_SEEDS")
    if chosen:
        return [int(seed) for seed in chosen.split(",")]
    return [*FIXED_SEEDS, fresh_seed()]


@dataclass(frozen=True)
class Delivery:
    consumer: str
    value: int
    key: str
    redelivery_count: int
    entry: tuple[int, int]
    batch_index: int


class Deliveries:
    """Every message every consumer received, in the order each received them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[Delivery] = []
        self._values: set[int] = set()

    def add(self, consumer: str, msg: pulsar.Message) -> Delivery:
        key, _, value = msg.data().decode().rpartition(":")
        mid = msg.message_id()
        delivery = Delivery(consumer, int(value), key, msg.redelivery_count(), (mid.ledger_id(), mid.entry_id()),
                            mid.batch_index())
        with self._lock:
            self.items.append(delivery)
            self._values.add(delivery.value)
        return delivery

    def seen(self) -> int:
        with self._lock:
            return len(self._values)

    def wait_for(self, count: int, deadline_s: float = DELIVERY_DEADLINE_S) -> None:
        """Poll until `count` distinct messages arrived or the deadline passed."""
        end = time.monotonic() + deadline_s
        while self.seen() < count and time.monotonic() < end:
            time.sleep(POLL_S)

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.items)


class Worker(threading.Thread):
    """Receives with a short timeout and acknowledges per `ack`, like an application.

    ack: "all" acknowledges at once; "later" holds back some acks until a few more
    messages came or the consumer went idle; "nack" negatively acknowledges some first
    deliveries. `close_after`: close the consumer after that many messages, leaving the
    last one and any held-back ones unacknowledged, so they must reach the others.
    """

    def __init__(self, name: str, consumer: pulsar.Consumer, deliveries: Deliveries, *, seed: str,
                 ack: str = "all", close_after: int | None = None) -> None:
        super().__init__(name=f"consumer-{name}", daemon=True)
        self.consumer_name = name
        self.consumer = consumer
        self.deliveries = deliveries
        self.rng = random.Random(seed)
        self.ack = ack
        self.close_after = close_after
        self.stopping = threading.Event()
        self.closed_with_unacked = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._receive_loop()
        except BaseException as exc:  # surfaced by the test, not lost in the thread
            self.error = exc

    def _receive_loop(self) -> None:
        held: list[pulsar.Message] = []
        received = 0
        while not self.stopping.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                self._ack_all(held)
                continue
            self.deliveries.add(self.consumer_name, msg)
            received += 1
            if self.close_after is not None and received >= self.close_after:
                self.consumer.close()
                self.closed_with_unacked = True
                return
            if self.ack == "later" and self.rng.random() < 0.3:
                held.append(msg)
            elif self.ack == "nack" and msg.redelivery_count() == 0 and self.rng.random() < 0.1:
                self.consumer.negative_acknowledge(msg)
            else:
                self.consumer.acknowledge(msg)
            if len(held) > 5:
                self._ack_all(held)

    def _ack_all(self, held: list[pulsar.Message]) -> None:
        for msg in held:
            self.consumer.acknowledge(msg)
        held.clear()


@dataclass
class Run:
    """Consumers of one subscription and what they received."""

    client: pulsar.Client
    topic: str
    queue_size: int = 1000
    batch_index_ack: bool = False
    deliveries: Deliveries = field(default_factory=Deliveries)
    workers: list[Worker] = field(default_factory=list)

    def add_consumer(self, name: str, *, seed: str = "", ack: str = "all", close_after: int | None = None) -> None:
        consumer = self.client.subscribe(
            self.topic, "sub", consumer_type=KEY_SHARED, consumer_name=name,
            receiver_queue_size=self.queue_size, negative_ack_redelivery_delay_ms=100,
            batch_index_ack_enabled=self.batch_index_ack)
        worker = Worker(name, consumer, self.deliveries, seed=f"{seed}/{name}", ack=ack, close_after=close_after)
        self.workers.append(worker)
        worker.start()

    def stop(self) -> None:
        for worker in self.workers:
            worker.stopping.set()
        for worker in self.workers:
            worker.join(timeout=10)
            assert worker.error is None, f"{worker.consumer_name}: {worker.error!r}"
            if not worker.closed_with_unacked:
                worker.consumer.close()

    @property
    def closed_with_unacked(self) -> bool:
        return any(worker.closed_with_unacked for worker in self.workers)


def send(producer: pulsar.Producer, values: range, key_of) -> None:
    """Send asynchronously (so batches fill) and fail on any send error."""
    failures: list[str] = []

    def sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            failures.append(str(result))

    for value in values:
        key = key_of(value)
        kwargs = {key[0]: key[1]} if key else {}
        producer.send_async(f"{key[1] if key else ''}:{value}".encode(), sent, **kwargs)
    producer.flush()
    assert not failures, failures[:5]


def check(deliveries: list[Delivery], count: int, *, exactly_once: bool, context: str) -> None:
    """At least once; exactly once for first deliveries (and for all, absent redelivery);
    per consumer, each sticky key's first deliveries in publish order.

    The sticky key is the entry's: the key of a batch's first message (the client copies it
    into the batch's MessageMetadata). A Default batch holds other keys too, and a message
    key's order across batches routed by different sticky keys is not promised: a batch
    parked for one consumer may reach another after that one leaves, behind later batches.
    """
    values = defaultdict(list)
    for d in deliveries:
        values[d.value].append(d)
    missing = sorted(set(range(count)) - values.keys())
    assert not missing, f"{context}: {len(missing)} of {count} never delivered, e.g. {missing[:10]}"
    first_twice = sorted(v for v, ds in values.items() if sum(d.redelivery_count == 0 for d in ds) > 1)
    assert not first_twice, f"{context}: delivered twice as first delivery: {first_twice[:10]}"
    if exactly_once:
        twice = sorted(v for v, ds in values.items() if len(ds) > 1)
        assert not twice, f"{context}: delivered more than once without a redelivery: {twice[:10]}"
    sticky = {d.entry: d.key for d in deliveries if d.batch_index <= 0}
    per_consumer_key: dict[tuple[str, str], list[int]] = defaultdict(list)
    for d in deliveries:
        if d.redelivery_count == 0:
            per_consumer_key[d.consumer, sticky[d.entry]].append(d.value)
    for (consumer, key), seq in per_consumer_key.items():
        assert seq == sorted(seq), f"{context}: sticky key {key!r} out of order at {consumer}: {seq[:20]}"


def producer_options(batching: str, max_batch: int = 1000) -> dict[str, object]:
    if batching == "off":
        return {"batching_enabled": False, "block_if_queue_full": True}
    return {"batching_enabled": True, "batching_type": BATCHING[batching], "batching_max_messages": max_batch,
            "block_if_queue_full": True}


# -- the two reported symptoms, deterministic ------------------------------------------------

def test_default_batching_delivers_everything_each_batch_to_one_consumer(module_client):
    """2,000 messages of 20 keys in Default batches (many keys each), two consumers made
    before producing: all arrive, and each batch goes whole to one consumer."""
    run = Run(module_client, "ks-default-batching")
    for name in ("a", "b"):
        run.add_consumer(name)
    producer = module_client.create_producer(run.topic, **producer_options("default"))
    send(producer, range(2000), lambda i: ("partition_key", f"key-{i % 20}"))
    run.deliveries.wait_for(2000)
    run.stop()
    deliveries = run.deliveries.snapshot()
    check(deliveries, 2000, exactly_once=True, context="default batching")
    by_entry: dict[tuple[int, int], set[str]] = defaultdict(set)
    for d in deliveries:
        by_entry[d.entry].add(d.consumer)
    assert all(len(owners) == 1 for owners in by_entry.values()), by_entry
    sticky = {d.entry: d.key for d in deliveries if d.batch_index == 0}
    by_sticky_key: dict[str, set[str]] = defaultdict(set)
    for entry, owners in by_entry.items():
        by_sticky_key[sticky[entry]] |= owners
    assert all(len(owners) == 1 for owners in by_sticky_key.values()), by_sticky_key


@pytest.mark.parametrize("attempt", range(3))
def test_key_based_batching_delivers_every_key_to_the_end(module_client, attempt):
    """The same with KeyBased batches: every message, each key at one consumer, in order."""
    run = Run(module_client, f"ks-key-based-{attempt}")
    for name in ("a", "b"):
        run.add_consumer(name)
    producer = module_client.create_producer(run.topic, **producer_options("key_based"))
    send(producer, range(2000), lambda i: ("partition_key", f"key-{i % 20}"))
    run.deliveries.wait_for(2000)
    run.stop()
    deliveries = run.deliveries.snapshot()
    check(deliveries, 2000, exactly_once=True, context="key-based batching")
    owners: dict[str, set[str]] = defaultdict(set)
    for d in deliveries:
        owners[d.key].add(d.consumer)
    assert all(len(o) == 1 for o in owners.values()), owners


# -- batch-index acks: each ack set narrows what is left, it does not replace it -------------------

def backlog(broker: Standalone, topic: str) -> int:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)["subscriptions"]["sub"]["msgBacklog"]


def wait_for_backlog(broker: Standalone, topic: str, expected: int, deadline_s: float = 10.0) -> int:
    end = time.monotonic() + deadline_s
    while (current := backlog(broker, topic)) != expected and time.monotonic() < end:
        time.sleep(POLL_S)
    return current


def send_one_batch(client: pulsar.Client, topic: str, count: int, key: str) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=count,
                                      batching_max_publish_delay_ms=5000)
    send(producer, range(count), lambda _i: ("partition_key", key))
    producer.close()


def subscribe_batch_index(client: pulsar.Client, topic: str, name: str) -> pulsar.Consumer:
    return client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name=name,
                            batch_index_ack_enabled=True, negative_ack_redelivery_delay_ms=100)


def test_batch_index_acks_from_two_deliveries_complete_the_entry(module_broker, module_client):
    """The client starts a fresh batch acker for a redelivered batch, so its ack set marks
    the indexes acknowledged before as still unacked; Pulsar's cursor ANDs ack sets, so
    the entry is done once every index was acknowledged in one delivery or another."""
    topic = "ks-batch-index-two-deliveries"
    first = subscribe_batch_index(module_client, topic, "first")
    send_one_batch(module_client, topic, 10, "x")
    msgs = [first.receive(timeout_millis=10000) for _ in range(10)]
    for msg in msgs[:5]:
        first.acknowledge(msg)
    first.close()  # flushes the batch-index acks of 0..4
    second = subscribe_batch_index(module_client, topic, "second")
    again = [second.receive(timeout_millis=10000) for _ in range(5)]
    assert [int(m.data().decode().rpartition(":")[2]) for m in again] == [5, 6, 7, 8, 9]
    for msg in again:
        second.acknowledge(msg)
    second.close()  # flushes an ack set with 5..9 cleared and 0..4 set
    assert wait_for_backlog(module_broker, topic, 0) == 0
    third = subscribe_batch_index(module_client, topic, "third")
    with pytest.raises(pulsar.Timeout):
        third.receive(timeout_millis=300)


def test_consumer_joining_behind_a_batch_acked_index_by_index_is_released(module_client):
    """A consumer that joins while a batch is out waits for that batch's acks, and no
    longer: here the batch is finished by acks from two deliveries (ack half, nack half)."""
    topic = "ks-batch-index-joiner"
    run = Run(module_client, topic, batch_index_ack=True)
    early = subscribe_batch_index(module_client, topic, "early")
    send_one_batch(module_client, topic, 10, "x")
    msgs = [early.receive(timeout_millis=10000) for _ in range(10)]
    run.add_consumer("joiner")  # the batch is out: the joiner waits for it to be acknowledged
    for msg in msgs[:5]:
        early.acknowledge(msg)
    for msg in msgs[5:]:
        early.negative_acknowledge(msg)
    early_worker = Worker("early", early, run.deliveries, seed="early")
    run.workers.append(early_worker)
    early_worker.start()
    producer = module_client.create_producer(topic, batching_enabled=False)
    send(producer, range(10, 50), lambda i: ("partition_key", f"key-{i % 20}"))
    run.deliveries.wait_for(45)
    run.stop()
    deliveries = [d for d in run.deliveries.snapshot() if d.value >= 10]
    values = {d.value for d in deliveries}
    missing = sorted(set(range(10, 50)) - values)
    assert not missing, f"never delivered: {missing}"
    assert {d.value for d in run.deliveries.snapshot() if d.value < 10} == {5, 6, 7, 8, 9}


# -- the recently-joined hold-back ends when nobody else is left -------------------------------

def receive_values(consumer: pulsar.Consumer, count: int, timeout_ms: int = 5000) -> list[int]:
    return [int(consumer.receive(timeout_millis=timeout_ms).data().decode().rpartition(":")[2]) for _ in range(count)]


def test_consumer_left_alone_is_not_held_back(module_client):
    """A consumer that joined while another held messages waits for their acks, to keep
    order per key across the two; once it is alone it gets the released messages first
    and then new ones, acked or not (Pulsar clears recentlyJoinedConsumers then)."""
    topic = "ks-left-alone"
    first = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="first")
    producer = module_client.create_producer(topic, batching_enabled=False)
    send(producer, range(10), lambda i: ("partition_key", f"key-{i}"))
    assert receive_values(first, 10) == list(range(10))  # held, not acknowledged
    second = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="second")
    first.close()
    assert sorted(receive_values(second, 10)) == list(range(10))  # redelivered, not acknowledged
    send(producer, range(10, 20), lambda i: ("partition_key", f"key-{i % 10}"))
    assert receive_values(second, 10) == list(range(10, 20))
    second.close()


def drain(consumer: pulsar.Consumer, quiet_ms: int = 1000) -> list[pulsar.Message]:
    """Receive and acknowledge until nothing came for `quiet_ms`."""
    got = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=quiet_ms)
        except pulsar.Timeout:
            return got
        consumer.acknowledge(msg)
        got.append(msg)


def test_held_back_joiner_does_not_starve_the_others(module_client):
    """While a joiner waits for an old message's ack, the consumer holding it still gets
    every new message of its own keys (Pulsar filters the joiner's parked entries out of
    replay reads): an application that acks the old message only later must not stall."""
    topic = "ks-joiner-starves"
    old = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="old")
    producer = module_client.create_producer(topic, batching_enabled=False)
    send(producer, range(1), lambda _i: ("partition_key", "key-0"))
    first = old.receive(timeout_millis=5000)  # held unacknowledged: the joiner must wait for it
    joiner = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="joiner")
    send(producer, range(1, 401), lambda i: ("partition_key", f"key-{i % 20}"))
    before = drain(old)
    old.acknowledge(first)
    later_joiner, later_old = drain(joiner), drain(old)
    assert not later_old, f"old got {len(before)} while the joiner waited, {len(later_old)} only after"
    assert len(before) + len(later_joiner) == 400
    assert {m.partition_key() for m in before}.isdisjoint(m.partition_key() for m in later_joiner)


# -- the sticky key: ordering key first -------------------------------------------------------

@pytest.mark.parametrize("topic_kind", ["persistent", "non-persistent"])
@pytest.mark.parametrize("batching", ["off", "key_based"])
def test_ordering_key_wins_over_partition_key(module_client, topic_kind, batching):
    """A message with both keys goes by its ordering key (Pulsar's peekStickyKey; the client's
    KeyBased batches are grouped the same way): a hundred messages of one ordering key and a
    hundred partition keys reach one consumer, in order; a hundred ordering keys under one
    partition key spread over both consumers."""
    topic = f"{topic_kind}://public/default/ks-dual-key-{batching}"
    consumers = {name: module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name=name)
                 for name in ("a", "b")}
    producer = module_client.create_producer(topic, **producer_options(batching))
    for i in range(200):
        keys = {"ordering_key": "same", "partition_key": f"p{i}"} if i < 100 else {
            "ordering_key": f"o{i}", "partition_key": "same"}
        producer.send_async(f"{keys['ordering_key']}:{i}".encode(), None, **keys)
    producer.flush()
    got = {name: [int(m.data().decode().rpartition(":")[2]) for m in drain(consumer)]
           for name, consumer in consumers.items()}
    one_ordering_key = {name: [v for v in values if v < 100] for name, values in got.items()}
    assert sorted(one_ordering_key.values(), key=len) == [[], list(range(100))], one_ordering_key
    many_ordering_keys = {name: [v for v in values if v >= 100] for name, values in got.items()}
    assert all(many_ordering_keys.values()), f"one partition key, yet a single consumer: {many_ordering_keys}"
    assert sorted(v for values in many_ordering_keys.values() for v in values) == list(range(100, 200))


# -- a key moves to a new consumer once its previous holder acknowledged it --------------------

def receive_all(consumer: pulsar.Consumer, quiet_ms: int = 1000) -> list[pulsar.Message]:
    """What arrives until nothing came for `quiet_ms`, acknowledged as it comes."""
    return drain(consumer, quiet_ms)


def test_joiner_waits_only_for_the_keys_held_elsewhere(module_client):
    """The first consumer holds one message unacknowledged; a second joins and takes over
    about half the keys. New messages of every key but the held one's reach their owner at
    once; those of the held key wait, wherever it now belongs, until the holder acknowledges
    it, and then come in order. (A joiner used to get nothing until everything older than
    its arrival was acknowledged, whatever the key.)"""
    topic = "ks-joiner-waits-per-key"
    first = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="first")
    producer = module_client.create_producer(topic, batching_enabled=False)
    send(producer, range(20), lambda i: ("partition_key", f"key-{i}"))
    old = [first.receive(timeout_millis=5000) for _ in range(20)]
    held = next(m for m in old if m.partition_key() == "key-7")
    for msg in old:
        if msg is not held:
            first.acknowledge(msg)
    joiner = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="joiner")
    send(producer, range(20, 420), lambda i: ("partition_key", f"key-{i % 20}"))
    before = {"first": receive_all(first), "joiner": receive_all(joiner)}
    keys_before = {name: {m.partition_key() for m in msgs} for name, msgs in before.items()}
    assert before["joiner"], "the joiner got nothing while an unrelated message was unacknowledged"
    first.acknowledge(held)
    after = {"first": receive_all(first), "joiner": receive_all(joiner)}
    values = sorted(int(m.data().decode().rpartition(":")[2]) for msgs in [*before.values(), *after.values()]
                    for m in msgs)
    assert values == list(range(20, 420))
    late = [m for msgs in after.values() for m in msgs]
    if late:  # key-7 moved to the joiner: all of it waited for the ack, and came in order
        assert {m.partition_key() for m in late} == {"key-7"} and "key-7" not in keys_before["joiner"]
        assert [m.data() for m in late] == [f"key-7:{i}".encode() for i in range(27, 420, 20)]
    else:  # key-7 stayed with the first consumer, which got it all along
        assert "key-7" in keys_before["first"]
    assert keys_before["first"].isdisjoint(keys_before["joiner"])


def test_joiner_is_not_held_back_by_a_delayed_message(module_client):
    """A message delivered in an hour keeps the subscription's mark-delete position behind
    it for that hour. That must not stall a consumer that joined meanwhile: the keys it
    takes over are held by nobody."""
    topic = "ks-joiner-delayed"
    first = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="first")
    producer = module_client.create_producer(topic, batching_enabled=False)
    producer.send(b"later:0", partition_key="later", deliver_after=timedelta(hours=1))
    producer.send(b"key-0:1", partition_key="key-0")
    held = first.receive(timeout_millis=5000)
    joiner = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="joiner")
    first.acknowledge(held)  # only the delayed message is left unacknowledged before the join
    send(producer, range(2, 202), lambda i: ("partition_key", f"key-{i % 20}"))
    got = {"first": receive_all(first), "joiner": receive_all(joiner)}
    assert got["joiner"], "the joiner waited for a message due in an hour"
    assert sorted(int(m.data().decode().rpartition(":")[2]) for msgs in got.values() for m in msgs) == list(
        range(2, 202))


@pytest.mark.parametrize("out_of_order", [False, True])
def test_allow_out_of_order_delivery_skips_the_wait(module_client, out_of_order):
    """allowOutOfOrderDelivery (the client's ConsumerKeySharedPolicy) gives up order across a
    change of consumers: a joiner gets the keys it takes over at once, though the first
    consumer still holds their earlier messages. Without it, it gets none of them until then."""
    topic = f"ks-out-of-order-{out_of_order}"
    policy = pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=out_of_order)
    first = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="first",
                                    key_shared_policy=policy)
    producer = module_client.create_producer(topic, batching_enabled=False)
    send(producer, range(20), lambda i: ("partition_key", f"key-{i}"))
    held = [first.receive(timeout_millis=5000) for _ in range(20)]  # one of every key, unacknowledged
    joiner = module_client.subscribe(topic, "sub", consumer_type=KEY_SHARED, consumer_name="joiner",
                                     key_shared_policy=policy)
    send(producer, range(20, 220), lambda i: ("partition_key", f"key-{i % 20}"))
    early = receive_all(joiner)
    assert bool(early) == out_of_order, f"{len(early)} messages reached the joiner while the first held its keys"
    for msg in held:
        first.acknowledge(msg)
    got = [*early, *receive_all(joiner), *receive_all(first)]
    assert sorted(int(m.data().decode().rpartition(":")[2]) for m in got) == list(range(20, 220))


# -- randomized --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    seed: int
    messages: int
    keys: int  # 0: messages without a key (Pulsar routes them by one fixed key)
    key_field: str
    batching: str
    max_batch: int
    consumers: int
    joiners: int  # consumers subscribing while messages are produced, at even intervals
    closer: bool
    ack: str
    queue_size: int
    batch_index_ack: bool

    @classmethod
    def draw(cls, seed: int) -> Scenario:
        rng = random.Random(seed)
        return cls(
            seed=seed,
            messages=rng.choice([200, 500, 1000]),
            keys=rng.choice([0, 1, 3, 20, 200]),
            key_field=rng.choice(["partition_key", "ordering_key"]),
            batching=rng.choice(["off", "default", "key_based"]),
            max_batch=rng.choice([10, 100, 1000]),
            consumers=rng.choice([1, 2, 3]),
            joiners=rng.choice([0, 1, 1, 2]),
            closer=rng.random() < 0.4,
            ack=rng.choice(["all", "later", "nack"]),
            queue_size=rng.choice([5, 50, 1000]),
            batch_index_ack=rng.random() < 0.3,
        )


def run_scenario(client: pulsar.Client, sc: Scenario) -> None:
    rng = random.Random(sc.seed)
    run = Run(client, f"ks-random-{sc.seed}", queue_size=sc.queue_size, batch_index_ack=sc.batch_index_ack)
    names = [f"c{n}" for n in range(sc.consumers)]
    for number, name in enumerate(names):
        close_after = sc.messages // (2 * sc.consumers) if sc.closer and number == 0 and sc.consumers > 1 else None
        run.add_consumer(name, seed=str(sc.seed), ack=sc.ack, close_after=close_after)
    keys = [f"k{n}" for n in range(sc.keys)]
    key_of = {i: (sc.key_field, rng.choice(keys)) if keys else None for i in range(sc.messages)}
    producer = client.create_producer(run.topic, **producer_options(sc.batching, sc.max_batch))
    bounds = [sc.messages * part // (sc.joiners + 1) for part in range(sc.joiners + 2)]
    for part, (start, end) in enumerate(itertools.pairwise(bounds)):
        if part:
            run.add_consumer(f"joiner{part}", seed=str(sc.seed), ack=sc.ack)
        send(producer, range(start, end), key_of.get)
    run.deliveries.wait_for(sc.messages)
    run.stop()
    producer.close()
    exactly_once = sc.ack != "nack" and not run.closed_with_unacked
    check(run.deliveries.snapshot(), sc.messages, exactly_once=exactly_once,
          context=f"seed {sc.seed} ({sc}; replay with MAGNETAR_KEY_SHARED_SEEDS={sc.seed})")


@pytest.mark.parametrize("seed", _seeds())
def test_randomized_delivery_and_order(module_client, seed):
    run_scenario(module_client, Scenario.draw(seed))
