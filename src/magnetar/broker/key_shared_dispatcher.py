"""Key_Shared dispatch: an entry goes to the consumer owning its sticky key's hash."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.broker.consumer import Consumer, DispatchEntry
from magnetar.broker.consumer_selectors import (
    StickyKeyConsumerSelector,
    sticky_key_hash,
)
from magnetar.broker.shared_dispatcher import MultipleConsumersDispatcher
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.subscription import PersistentSubscription


class KeySharedDispatcher(MultipleConsumersDispatcher):
    """Key_Shared: each key's hash belongs to one consumer, and order per key holds.

    Order per key survives consumers coming and going because (1) an entry that
    can't go to its key's owner now is parked, and every later entry with that
    key is parked behind it in the same pass; parked entries are read first
    next time; (2) a consumer that joins while messages are out receives
    nothing read after its arrival until everything before it is acknowledged,
    since keys it takes over may still be unacknowledged at their old owner
    (Pulsar's recentlyJoinedConsumers); once it is the only consumer left, no
    other can hold such messages and the hold-back ends.
    """

    def __init__(self, subscription: PersistentSubscription, meta: pb.KeySharedMeta | None) -> None:
        super().__init__(subscription)
        self.selector = StickyKeyConsumerSelector(meta)
        self._join_limit: dict[Consumer, Position] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        self.selector.add(consumer)
        # Only another consumer can hold older messages of the keys this one takes over.
        if self.consumers and (self.outstanding or self.replay):
            self._join_limit[consumer] = self.read_position
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self._join_limit.pop(consumer, None)
        self.selector.remove(consumer)
        super().remove_consumer(consumer)
        if len(self.consumers) <= 1:
            # Alone, a consumer gets what the others left (parked for replay, read before
            # anything new) ahead of newer messages, so order holds without waiting for its
            # acks; Pulsar clears recentlyJoinedConsumers here too.
            self._join_limit.clear()

    def owner(self, key_hash: int) -> Consumer | None:
        return self.selector.owner(key_hash)

    @staticmethod
    def _hash(entry: DispatchEntry) -> int:
        return sticky_key_hash(entry.sticky_key)

    def _may_take_replay(self, position: Position, key_hash: int) -> bool:
        """Only what its owner may take now: an entry read only to be parked again would
        use up the pass's budget, and a backlog parked for a held-back joiner would then
        starve every other consumer (Pulsar's filterOutEntriesWillBeDiscarded)."""
        if key_hash < 0:  # released by a consumer before its key was known here
            return True
        owner = self.owner(key_hash)
        return owner is not None and owner.can_receive and not self._held(owner, position)

    def acknowledged(self, positions: Iterable[Position]) -> None:
        super().acknowledged(positions)
        if self._join_limit:
            first = self.subscription.first_unacked_position()
            for consumer, limit in list(self._join_limit.items()):
                if first >= limit:
                    del self._join_limit[consumer]
            self.schedule()

    def _assign(self, entries: list[DispatchEntry]) -> list[DispatchEntry]:
        parked: list[DispatchEntry] = []
        # A key waits behind its rescheduled entry, and behind any entry parked this pass.
        blocked: set[int] = {key_hash for _, key_hash in self._rescheduled.values()}
        for entry in entries:
            key_hash = self._hash(entry)
            consumer = self.owner(key_hash)
            if (key_hash in blocked or consumer is None or not consumer.can_receive
                    or self._held(consumer, entry.position)):
                blocked.add(key_hash)
                parked.append(entry)
            elif not self._deliver(consumer, entry) and entry.position in self._rescheduled:
                blocked.add(key_hash)
        return parked

    def _held(self, consumer: Consumer, position: Position) -> bool:
        """A joiner waits for what was read before it came, and for what was read before
        any other joiner still waiting came: an entry parked while an earlier joiner owned
        its key may have older messages of that key still out at a consumer (Pulsar's rule
        for replayed entries, applied to all since new reads lie past every limit anyway)."""
        if consumer not in self._join_limit:
            return False
        return position >= min(self._join_limit.values())
