"""Key_Shared dispatch: an entry goes to the consumer owning its sticky key's hash."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.broker.topics.consumer import Consumer, DispatchEntry
from magnetar.broker.topics.consumer_selectors import (
    KeySharedConsumers,
    StickyKeyConsumerSelector,
    sticky_key_hash,
)
from magnetar.broker.topics.persistent.shared_dispatcher import MultipleConsumersDispatcher
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription


class KeySharedDispatcher(KeySharedConsumers, MultipleConsumersDispatcher):
    """Key_Shared: each key's hash belongs to one consumer, and order per key holds.

    Order per key survives consumers coming and going because (1) an entry that
    can't go to its key's owner now is parked, and every later entry with that
    key is parked behind it in the same pass; parked entries are read first
    next time; (2) a hash goes to its owner only while no other consumer holds
    entries of it unacknowledged: when a consumer joins and takes hashes over,
    their earlier messages may still be out at their previous owner, and the
    new owner waits for those acknowledgements, not for any others (Pulsar's
    draining hashes, PIP-379). Subscribing with allowOutOfOrderDelivery drops (2).
    """

    def __init__(self, subscription: PersistentSubscription, meta: pb.KeySharedMeta | None) -> None:
        super().__init__(subscription)
        self.selector = StickyKeyConsumerSelector(meta)
        self._in_order = not (meta is not None and meta.allowOutOfOrderDelivery)
        self._out_hash: dict[Position, int] = {}  # outstanding entry -> its hash
        self._holders: dict[int, Counter[Consumer]] = {}  # hash -> consumers holding entries of it

    def owner(self, key_hash: int) -> Consumer | None:
        return self.selector.owner(key_hash)

    @staticmethod
    def _hash(entry: DispatchEntry) -> int:
        return sticky_key_hash(entry.sticky_key)

    def _may_take_replay(self, position: Position, key_hash: int) -> bool:
        """Only what its owner may take now: an entry read only to be parked again would
        use up the pass's budget, and a backlog parked behind a draining hash would then
        starve every other consumer (Pulsar's filterOutEntriesWillBeDiscarded)."""
        owner = self.owner(key_hash)
        return owner is not None and owner.can_receive and not self._draining_elsewhere(key_hash, owner)

    def _assign(self, entries: list[DispatchEntry]) -> int:
        """Each entry's key is hashed once here: a parked entry keeps its hash in the
        replay set."""
        parked = 0
        # A key waits behind its rescheduled entry, and behind any entry parked this pass.
        blocked: set[int] = {key_hash for _, key_hash in self._rescheduled.values()}
        for entry in entries:
            key_hash = self._hash(entry)
            consumer = self.owner(key_hash)
            if (key_hash in blocked or consumer is None or not consumer.can_receive
                    or self._draining_elsewhere(key_hash, consumer)):
                blocked.add(key_hash)
                self.replay[entry.position] = key_hash
                parked += 1
            elif self._deliver(consumer, entry):
                self._count_out(consumer, entry.position, key_hash)
            elif entry.position in self._rescheduled:
                blocked.add(key_hash)
        return parked

    # -- who holds which hash
    def _draining_elsewhere(self, key_hash: int, owner: Consumer) -> bool:
        """Another consumer still holds entries of this hash unacknowledged: it had the hash
        before `owner` took it over, and its messages must be acknowledged first."""
        holders = self._holders.get(key_hash)
        return self._in_order and holders is not None and any(c is not owner for c in holders)

    def _count_out(self, consumer: Consumer, position: Position, key_hash: int) -> None:
        self._out_hash[position] = key_hash
        self._holders.setdefault(key_hash, Counter())[consumer] += 1

    def _let_go(self, consumer: Consumer, position: Position) -> int:
        """The entry is no longer out (acknowledged, or taken back); returns its hash. A hash
        nobody holds any more may go to its owner: a dispatch pass is scheduled."""
        key_hash = self._out_hash.pop(position)
        holders = self._holders[key_hash]
        holders[consumer] -= 1
        if holders[consumer] <= 0:
            del holders[consumer]
            if not holders:
                del self._holders[key_hash]
            if self.replay:
                self.schedule()
        return key_hash

    def acknowledged(self, positions: Iterable[Position]) -> None:
        positions = list(dict.fromkeys(positions))  # one ACK may name an entry more than once
        for position in positions:
            consumer = self.outstanding.get(position)
            if consumer is not None:
                self._let_go(consumer, position)
        super().acknowledged(positions)

    def _release(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        """Taken back entries wait for replay under their own hash, so they stay ahead of
        the later entries of their key."""
        for position in self._take_back(consumer, positions):
            self.replay[position] = self._let_go(consumer, position)

    def reset(self, position: Position) -> None:
        super().reset(position)
        self._out_hash.clear()
        self._holders.clear()
