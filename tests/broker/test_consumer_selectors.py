"""Who may receive a message, as consumer_selectors.py decides it for every dispatcher:
Key_Shared's hash ring (AUTO_SPLIT) and declared ranges (STICKY), Shared's round robin,
Failover's election. The rules alone, on consumers reduced to what the rules read."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import pytest
from pulsar_murmur import murmur3_32, pulsar_sticky_hash
from seeds import fresh_seed

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.consumer_selectors import (
    HASH_RANGE_SIZE,
    RoundRobinSelector,
    StickyKeyConsumerSelector,
    check_exclusive,
    choose_active,
    sticky_key_hash,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

ALL_HASHES = range(HASH_RANGE_SIZE)


@dataclass
class Cnx:
    id: int = 1


@dataclass(eq=False)
class Member:
    """The fields of a broker Consumer that the selectors read."""

    name: str
    consumer_id: int = 0
    cnx: Cnx = field(default_factory=Cnx)
    key_shared_meta: pb.KeySharedMeta | None = None
    can_receive: bool = True
    priority_level: int = 0


def sticky(*ranges: tuple[int, int]) -> pb.KeySharedMeta:
    return pb.KeySharedMeta(keySharedMode=pb.STICKY,
                            hashRanges=[pb.IntRange(start=start, end=end) for start, end in ranges])


def auto_split(*names: str) -> tuple[StickyKeyConsumerSelector, list[Member]]:
    selector = StickyKeyConsumerSelector(pb.KeySharedMeta(keySharedMode=pb.AUTO_SPLIT))
    members = [Member(name, consumer_id=len(name)) for name in names]
    for member in members:
        selector.add(member)
    return selector, members


def owners(selector: StickyKeyConsumerSelector) -> list[Member | None]:
    return [selector.owner(h) for h in ALL_HASHES]


#: Published MurmurHash3 x86 32-bit values (seed 0), and where Pulsar puts each key.
KNOWN_VECTORS = [
    (b"", 0x00000000, 1),  # 0 is Pulsar 4's "no hash": moved to 1
    (b"\0\0\0\0", 0x2362F9DE, 63966),
    (b"a", 0x3C2569B2, 27058),
    (b"abc", 0xB3DD93FA, 37882),
    (b"Hello, world!", 0xC0363E43, 15939),
    (b"The quick brown fox jumps over the lazy dog", 0x2E4FF723, 63267),
    (b"NONE_KEY", 0x9E15BEA3, 48803),  # every keyless message
]


@pytest.mark.parametrize(("key", "murmur", "slot"), KNOWN_VECTORS)
def test_key_hashes_are_pulsars_murmur3(key, murmur, slot):
    assert murmur3_32(key) == murmur
    assert pulsar_sticky_hash(key) == slot
    assert sticky_key_hash(key) == slot


def test_random_keys_hash_where_pulsar_puts_them():
    """Every length class of the tail (0-3 bytes), any bytes, long keys."""
    rng = random.Random(fresh_seed())
    for _ in range(2000):
        key = rng.randbytes(rng.randrange(0, 70))
        assert sticky_key_hash(key) == pulsar_sticky_hash(key), key


def test_key_hashes_fall_in_the_hash_range_and_are_stable():
    keys = [b"", b"a", b"key-1", "ключ".encode(), bytes(range(256)), b"x" * 10_000]
    hashes = [sticky_key_hash(key) for key in keys]
    assert all(isinstance(h, int) and 0 <= h < HASH_RANGE_SIZE for h in hashes)
    assert hashes == [sticky_key_hash(key) for key in keys]
    spread = {sticky_key_hash(f"k{i}".encode()) for i in range(1000)}
    assert len(spread) > 950  # a hash, not a constant or a few buckets


def test_no_consumer_owns_nothing():
    assert StickyKeyConsumerSelector(None).owner(0) is None
    selector, [only] = auto_split("only")
    selector.remove(only)
    assert selector.owner(123) is None


def test_one_consumer_owns_every_hash():
    selector, [only] = auto_split("only")
    assert set(owners(selector)) == {only}


def test_auto_split_spreads_the_hash_space_over_every_consumer():
    selector, members = auto_split("c0", "c1", "c2", "c3")
    shares = Counter(owners(selector))
    assert set(shares) == set(members)
    assert min(shares.values()) > HASH_RANGE_SIZE // 4 // 3  # none starved (100 points each)


def test_a_consumer_leaving_moves_only_its_own_keys():
    selector, members = auto_split("c0", "c1", "c2", "c3")
    before = owners(selector)
    leaving = members[2]
    selector.remove(leaving)
    after = owners(selector)
    for old, new in zip(before, after, strict=True):
        assert new is not leaving
        if old is not leaving:
            assert new is old
    selector.remove(leaving)  # twice: nothing happens
    assert owners(selector) == after


def test_a_consumer_joining_takes_keys_only_for_itself():
    selector, _ = auto_split("c0", "c1", "c2")
    before = owners(selector)
    newcomer = Member("c3", consumer_id=9)
    selector.add(newcomer)
    after = owners(selector)
    moved = [new for old, new in zip(before, after, strict=True) if new is not old]
    assert moved and set(moved) == {newcomer}


def test_the_ring_depends_on_who_consumes_not_on_the_order_they_joined():
    first, _ = auto_split("a", "b", "c")
    second, _ = auto_split("c", "a", "b")
    assert [m.name for m in owners(first)] == [m.name for m in owners(second)]


def test_consumers_with_one_name_on_other_connections_are_told_apart():
    selector = StickyKeyConsumerSelector(None)
    one, other = Member("same", cnx=Cnx(1)), Member("same", cnx=Cnx(2))
    selector.add(one)
    selector.add(other)
    assert set(owners(selector)) == {one, other}


def test_hashes_past_the_last_point_wrap_to_the_first():
    selector, _ = auto_split("c0", "c1")
    points = sorted(point for point, _, _ in selector._ring)
    last, first_owner = points[-1], selector.owner(points[0])
    assert all(selector.owner(h) is first_owner for h in range(last + 1, HASH_RANGE_SIZE))
    assert all(selector.owner(h) is first_owner for h in range(points[0] + 1))


def test_sticky_consumers_own_exactly_their_ranges_inclusive():
    selector = StickyKeyConsumerSelector(sticky((0, 0)))
    low = Member("low", key_shared_meta=sticky((0, 99), (200, 299)))
    high = Member("high", key_shared_meta=sticky((300, 65535)))
    selector.add(low)
    selector.add(high)
    expected = [low if h < 100 or 200 <= h < 300 else None if h < 200 else high for h in ALL_HASHES]
    assert owners(selector) == expected
    selector.remove(low)
    assert selector.owner(0) is None and selector.owner(300) is high


@pytest.mark.parametrize(("ranges", "reason"), [
    ((), "needs hash ranges"),
    (((10, 5),), "hash range [10, 5] is invalid"),
    (((-1, 5),), "hash range [-1, 5] is invalid"),
    (((0, HASH_RANGE_SIZE),), f"hash range [0, {HASH_RANGE_SIZE}] is invalid"),
    (((100, 200),), "hash range [100, 200] overlaps [150, 300] of taken"),
    (((300, 400),), "hash range [300, 400] overlaps [150, 300] of taken"),
    (((0, 150),), "hash range [0, 150] overlaps [150, 300] of taken"),
    (((160, 170),), "overlaps [150, 300]"),
    (((0, 10), (140, 400)), "hash range [140, 400] overlaps"),
])
def test_sticky_ranges_that_are_invalid_or_taken_are_refused(ranges, reason):
    selector = StickyKeyConsumerSelector(sticky((0, 0)))
    taken = Member("taken", key_shared_meta=sticky((150, 300)))
    selector.add(taken)
    with pytest.raises(BrokerServiceError) as refused:
        selector.add(Member("late", key_shared_meta=sticky(*ranges)))
    assert refused.value.code == pb.ConsumerAssignError
    assert reason in str(refused.value)
    assert set(owners(selector)) == {None, taken}  # the refused consumer owns nothing


def test_sticky_ranges_next_to_each_other_are_fine():
    selector = StickyKeyConsumerSelector(sticky((0, 0)))
    for i, (start, end) in enumerate([(0, 149), (150, 300), (301, 301), (302, 65535)]):
        selector.add(Member(f"m{i}", key_shared_meta=sticky((start, end))))
    assert None not in owners(selector)


def test_a_sticky_consumer_without_meta_is_refused():
    selector = StickyKeyConsumerSelector(sticky((0, 0)))
    with pytest.raises(BrokerServiceError) as refused:
        selector.add(Member("bare"))
    assert refused.value.message == "Key_Shared STICKY mode needs hash ranges"


def test_round_robin_takes_turns_and_skips_who_cannot_receive():
    consumers = [Member(f"c{i}") for i in range(3)]
    selector = RoundRobinSelector()
    assert [selector.select(consumers).name for _ in range(7)] == ["c0", "c1", "c2", "c0", "c1", "c2", "c0"]
    consumers[2].can_receive = False
    assert [selector.select(consumers).name for _ in range(4)] == ["c1", "c0", "c1", "c0"]
    for consumer in consumers:
        consumer.can_receive = False
    assert selector.select(consumers) is None
    assert RoundRobinSelector().select([]) is None


def test_round_robin_survives_the_list_shrinking():
    consumers = [Member(f"c{i}") for i in range(4)]
    selector = RoundRobinSelector()
    for _ in range(3):
        selector.select(consumers)
    assert selector.select(consumers[:2]).name in {"c0", "c1"}


def test_failover_elects_by_priority_then_name_and_spreads_partitions():
    members = [Member("b", priority_level=1), Member("c"), Member("a", priority_level=1), Member("d")]
    assert choose_active([], 0) is None
    assert [choose_active(members, p).name for p in (-1, 0, 1, 2, 3)] == ["c", "c", "d", "c", "d"]
    rng = random.Random(7)
    shuffled = members[:]
    rng.shuffle(shuffled)
    assert [choose_active(shuffled, p).name for p in range(4)] == ["c", "d", "c", "d"]
    assert choose_active([m for m in members if m.priority_level == 1], 1).name == "b"
    alone_on_top = [Member("z", priority_level=0), Member("x", priority_level=5), Member("y", priority_level=5)]
    assert [choose_active(alone_on_top, p).name for p in range(3)] == ["z", "z", "z"]


def test_exclusive_takes_one_consumer_only():
    check_exclusive(pb.CommandSubscribe.Exclusive, [])
    check_exclusive(pb.CommandSubscribe.Failover, [Member("a")])
    check_exclusive(pb.CommandSubscribe.Shared, [Member("a")])
    with pytest.raises(BrokerServiceError) as refused:
        check_exclusive(pb.CommandSubscribe.Exclusive, [Member("a")])
    assert refused.value.code == pb.ConsumerBusy
    assert refused.value.message == "Exclusive consumer is already connected"
