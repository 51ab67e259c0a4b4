"""Which consumer of a subscription may have a message: the rules every dispatcher shares.

A persistent dispatcher reads stored entries and then asks who gets them; a
non-persistent one asks the same question about a message that exists only
while it is being published. Answering it in one place means a Failover
subscription elects the same consumer, and a key goes to the same Key_Shared
consumer, whichever kind of topic the subscription is on.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import mmh3

from magnetar.broker.errors import BrokerServiceError
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer

HASH_RANGE_SIZE = 65536


def sticky_key_hash(key: bytes) -> int:
    """Where Pulsar's broker puts a key in the 0..65535 Key_Shared hash space, exactly: users
    who subscribe with STICKY ranges compute that place themselves (Pulsar's
    Murmur3_32Hash: MurmurHash3 x86 32-bit, seed 0, sign bit cleared, then modulo the
    range). Pulsar 4 keeps hash 0 to mean "not computed" and moves it to 1."""
    return (mmh3.hash(key, 0, signed=False) & 0x7FFFFFFF) % HASH_RANGE_SIZE or 1


# -- Exclusive and Failover
def check_exclusive(sub_type: int, consumers: Sequence[Consumer]) -> None:
    """An Exclusive subscription takes a second consumer only once the first is gone."""
    if sub_type == pb.CommandSubscribe.Exclusive and consumers:
        raise BrokerServiceError(pb.ConsumerBusy, "Exclusive consumer is already connected")


def choose_active(consumers: Sequence[Consumer], partition: int) -> Consumer | None:
    """Failover picks by priority, then name; partitions spread over the top-priority consumers."""
    if not consumers:
        return None
    ordered = sorted(consumers, key=lambda c: (c.priority_level, c.name))
    top = [c for c in ordered if c.priority_level == ordered[0].priority_level]
    return top[max(partition, 0) % len(top)]


def announce_active(consumers: Sequence[Consumer], active: Consumer) -> None:
    """ACTIVE_CONSUMER_CHANGE to every Failover consumer, so each knows whether it is the one."""
    for consumer in consumers:
        consumer.cnx.send_active_consumer_change(consumer.consumer_id, consumer is active)


class SingleActiveElection:
    """Exclusive and Failover dispatchers, stored or not: every change of consumers elects
    the active one again, and Failover consumers hear who it is. A dispatcher reacts to a
    new active consumer in `_active_changed` (a stored one gives back what the previous held)."""

    sub_type: int
    active: Consumer | None
    consumers: list[Consumer]
    subscription: Any

    def add_consumer(self, consumer: Consumer) -> None:
        check_exclusive(self.sub_type, self.consumers)
        super().add_consumer(consumer)  # type: ignore[misc]
        self._elect()

    def remove_consumer(self, consumer: Consumer) -> None:
        super().remove_consumer(consumer)  # type: ignore[misc]
        self._elect()

    def _elect(self) -> None:
        chosen = choose_active(self.consumers, self.subscription.topic.partition)
        if chosen is self.active:
            return
        previous, self.active = self.active, chosen
        if chosen is None:
            return
        if self.sub_type == pb.CommandSubscribe.Failover:
            announce_active(self.consumers, chosen)
        self._active_changed(previous)

    def _active_changed(self, previous: Consumer | None) -> None:
        """Nothing to do unless the dispatcher holds messages for consumers."""


# -- Shared
class RoundRobinSelector:
    """Shared: the next consumer after the last one chosen that can receive now."""

    def __init__(self) -> None:
        self._next = 0

    def select(self, consumers: Sequence[Consumer]) -> Consumer | None:
        count = len(consumers)
        for step in range(count):
            consumer = consumers[(self._next + step) % count]
            if consumer.can_receive:
                self._next = (self._next + step + 1) % count
                return consumer
        return None


# -- Key_Shared
class StickyKeyConsumerSelector:
    """Key_Shared: the consumer that owns a key's hash.

    AUTO_SPLIT spreads the hash space over consumers by consistent hashing (so a
    consumer joining or leaving moves only its share of keys); STICKY uses the
    hash ranges each consumer declared, which must not overlap.
    """

    POINTS_PER_CONSUMER = 100

    def __init__(self, meta: pb.KeySharedMeta | None) -> None:
        self.sticky = meta is not None and meta.keySharedMode == pb.STICKY
        self._consumers: list[Consumer] = []
        self._ring: list[tuple[int, int, Consumer]] = []

    def add(self, consumer: Consumer) -> None:
        """Take a consumer on; a STICKY consumer whose ranges are invalid or taken is refused."""
        if self.sticky:
            self._check_sticky_ranges(consumer)
        self._consumers.append(consumer)
        self._rebuild_ring()

    def remove(self, consumer: Consumer) -> None:
        if consumer in self._consumers:
            self._consumers.remove(consumer)
            self._rebuild_ring()

    def _check_sticky_ranges(self, consumer: Consumer) -> None:
        meta = consumer.key_shared_meta
        if meta is None or not meta.hashRanges:
            raise BrokerServiceError(pb.ConsumerAssignError, "Key_Shared STICKY mode needs hash ranges")
        for new in meta.hashRanges:
            if not 0 <= new.start <= new.end < HASH_RANGE_SIZE:
                raise BrokerServiceError(pb.ConsumerAssignError, f"hash range [{new.start}, {new.end}] is invalid")
            for other in self._consumers:
                for old in other.key_shared_meta.hashRanges if other.key_shared_meta else ():
                    if new.start <= old.end and old.start <= new.end:
                        raise BrokerServiceError(
                            pb.ConsumerAssignError,
                            f"hash range [{new.start}, {new.end}] overlaps [{old.start}, {old.end}] of {other.name}",
                        )

    def _rebuild_ring(self) -> None:
        ring = []
        for number, consumer in enumerate(self._consumers):
            identity = f"{consumer.name}/{consumer.cnx.id}/{consumer.consumer_id}"
            for point in range(self.POINTS_PER_CONSUMER):
                ring.append((sticky_key_hash(f"{identity}#{point}".encode()), number, consumer))
        ring.sort(key=lambda item: (item[0], item[1]))
        self._ring = ring

    def owner(self, key_hash: int) -> Consumer | None:
        if self.sticky:
            for consumer in self._consumers:
                meta = consumer.key_shared_meta
                if meta and any(r.start <= key_hash <= r.end for r in meta.hashRanges):
                    return consumer
            return None
        if not self._ring:
            return None
        index = bisect.bisect_left(self._ring, key_hash, key=lambda item: item[0])
        return self._ring[index % len(self._ring)][2]


class KeySharedConsumers:
    """Key_Shared dispatchers, stored or not: the selector hears of every consumer that comes or
    goes, before the dispatcher does."""

    selector: StickyKeyConsumerSelector

    def add_consumer(self, consumer: Consumer) -> None:
        self.selector.add(consumer)
        super().add_consumer(consumer)  # type: ignore[misc]

    def remove_consumer(self, consumer: Consumer) -> None:
        self.selector.remove(consumer)
        super().remove_consumer(consumer)  # type: ignore[misc]
