"""The receiver queue shared by a multi-topic consumer's partitions: one partition forgetting
what it queued (a re-registration, a seek, a redelivery) must leave its siblings' messages,
which the broker sent to them and sends nobody again, and give back the permits of its own
only when the broker still counts them."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from magnetar.client.aio.receive_queue import AsyncReceiveQueue, ThreadReceiveQueue


class Owner:
    """A partition consumer as the queue sees it: who owns an item, and permits given back."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.given_back = 0

    def dropped_by_reader(self, count: int) -> None:
        self.given_back += count


def _item(owner: Owner, number: int) -> tuple:
    return (number, SimpleNamespace(owner=owner))  # item_owner reads item[1].owner, a message's context


def _drain(queue) -> list:
    got = []
    while (item := queue.get_nowait()) is not None:
        got.append(item)
    return got


@pytest.mark.parametrize("kind", [AsyncReceiveQueue, ThreadReceiveQueue])
@pytest.mark.parametrize("permits_back", [True, False])
def test_clearing_one_owner_keeps_the_others_items_in_order(kind, permits_back: bool) -> None:
    rng = random.Random()
    owners = [Owner(f"partition-{i}") for i in range(rng.randint(2, 4))]
    cleared = rng.choice(owners)
    queue = kind()
    before, number = [], 0
    for _ in range(rng.randint(5, 30)):  # one entry's messages a list, owners interleaved
        owner = rng.choice(owners)
        entry = [_item(owner, number + i) for i in range(rng.randint(1, 4))]
        number += len(entry)
        before += entry
        queue.put_many(entry)
    taken = [queue.get_nowait() for _ in range(rng.randint(0, 3))]  # a reader's buffer may hold some
    eager = queue.clear(cleared, permits_back)
    after = [_item(cleared, number), _item(cleared, number + 1)]
    queue.put_many(after)
    rest = _drain(queue)
    kept = [item for item in before[len(taken):] if item[1].owner is not cleared]
    assert rest == kept + after
    dropped = sum(1 for item in before[len(taken):] if item[1].owner is cleared)
    if kind is AsyncReceiveQueue:  # counted at once; the consumer decides about its permits
        assert eager == dropped and cleared.given_back == 0
    else:  # met by the reader later: permits back only when the broker still counts them
        assert eager == 0 and cleared.given_back == (dropped if permits_back else 0)
    assert all(owner.given_back == 0 for owner in owners if owner is not cleared)
