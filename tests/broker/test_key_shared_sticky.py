"""Key_Shared STICKY ranges through a real standalone, with the official client: a key reaches
the consumer whose declared range holds the hash Pulsar's broker computes for it.

Users who subscribe with `ConsumerKeySharedPolicy(sticky_ranges=...)` compute that hash
themselves (MurmurHash3 of the sticky key, as in Pulsar's documentation), so magnetar must put
every key exactly there. The sticky key is the entry's: the ordering key, else the partition
key, else Pulsar's fixed NONE_KEY; a Default batch of many keys goes by its first message's
key. The expected owner comes from tests/pulsar_murmur.py, written from Pulsar's source and
independent of the broker's compiled hash.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import pulsar
import pytest
from polling import wait_for
from pulsar_murmur import RANGE_SIZE, pulsar_sticky_hash
from seeds import fresh_seed

KEY_SHARED = pulsar.ConsumerType.KeyShared
MESSAGES = 300
DEADLINE_S = 20.0
BATCHING = {
    "off": {"batching_enabled": False},
    "key_based": {"batching_enabled": True, "batching_type": pulsar.BatchingType.KeyBased},
    "default": {"batching_enabled": True, "batching_type": pulsar.BatchingType.Default},
}
NONE_KEY = b"NONE_KEY"


def split_ranges(rng: random.Random, parts: int) -> list[tuple[int, int]]:
    """The whole hash space cut at random points into `parts` inclusive ranges."""
    cuts = sorted(rng.sample(range(1, RANGE_SIZE), parts - 1))
    starts = [0, *cuts]
    ends = [cut - 1 for cut in cuts] + [RANGE_SIZE - 1]
    return list(zip(starts, ends, strict=True))


def random_key(rng: random.Random) -> str:
    alphabet = "abcxyz0189-_/ключ鍵🔑"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))


def message_keys(rng: random.Random, index: int) -> tuple[dict[str, str], bytes]:
    """The keys one message is sent with, and the sticky key Pulsar's broker takes from them."""
    kind = rng.choice(["partition", "ordering", "both", "none"])
    if kind == "none":
        return {}, NONE_KEY
    if kind == "partition":
        key = random_key(rng)
        return {"partition_key": key}, key.encode()
    ordering = random_key(rng)
    keys = {"ordering_key": ordering}
    if kind == "both":
        keys["partition_key"] = f"p{index}"
    return keys, ordering.encode()


class Received:
    """What each consumer's message listener got: listeners receive as messages arrive, so an
    idle consumer never paces a busy one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_consumer: dict[str, list[pulsar.Message]] = defaultdict(list)

    def listener(self, name: str):
        def received(consumer: pulsar.Consumer, msg: pulsar.Message) -> None:
            consumer.acknowledge(msg)
            with self._lock:
                self.by_consumer[name].append(msg)
        return received

    def count(self) -> int:
        with self._lock:
            return sum(map(len, self.by_consumer.values()))


def sticky_key_of_entry(got: dict[str, list[pulsar.Message]], sticky_keys: dict[int, bytes],
                        batching: str) -> dict[int, bytes]:
    """The sticky key each message was routed by. A KeyBased batch holds one sticky key; a
    Default batch goes by its first message's (batch index 0), found by the entry's id."""
    if batching != "default":
        return sticky_keys
    first_of_entry = {(m.message_id().ledger_id(), m.message_id().entry_id()): int(m.data())
                      for msgs in got.values() for m in msgs if m.message_id().batch_index() <= 0}
    return {int(m.data()): sticky_keys[first_of_entry[m.message_id().ledger_id(), m.message_id().entry_id()]]
            for msgs in got.values() for m in msgs}


#: Non-persistent messages all carry the id 0:0 (as in Pulsar), so a Default batch can't be
#: told from its neighbours there: that case runs on persistent topics only.
CASES = [(kind, batching) for kind in ("persistent", "non-persistent") for batching in BATCHING
         if (kind, batching) != ("non-persistent", "default")]


@pytest.mark.parametrize(("topic_kind", "batching"), CASES)
def test_keys_reach_the_consumer_whose_sticky_range_holds_pulsars_hash(module_client, topic_kind, batching):
    seed = fresh_seed()
    rng = random.Random(f"{seed}/{topic_kind}/{batching}")
    ranges = split_ranges(rng, 3)
    topic = f"{topic_kind}://public/default/ks-sticky-{batching}-{seed}"
    received = Received()
    consumers = {
        f"c{number}": module_client.subscribe(
            topic, "sub", consumer_type=KEY_SHARED, consumer_name=f"c{number}",
            message_listener=received.listener(f"c{number}"),
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(
                key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[hash_range]))
        for number, hash_range in enumerate(ranges)
    }
    producer = module_client.create_producer(topic, block_if_queue_full=True, **BATCHING[batching])
    sticky_keys: dict[int, bytes] = {}
    for index in range(MESSAGES):
        keys, sticky_keys[index] = message_keys(rng, index)
        producer.send_async(str(index).encode(), None, **keys)
    producer.flush()

    wait_for(lambda: received.count() >= MESSAGES, timeout=DEADLINE_S)
    got = received.by_consumer
    context = f"seed {seed}, ranges {ranges}"
    assert sorted(int(m.data()) for msgs in got.values() for m in msgs) == list(range(MESSAGES)), context
    routed_by = sticky_key_of_entry(got, sticky_keys, batching)
    for name, msgs in got.items():
        for msg in msgs:
            slot = pulsar_sticky_hash(routed_by[int(msg.data())])
            owner = next(f"c{n}" for n, (start, end) in enumerate(ranges) if start <= slot <= end)
            assert name == owner, f"{context}: message {int(msg.data())} (hash {slot}) reached {name}, not {owner}"
    for consumer in consumers.values():
        consumer.close()
    producer.close()
