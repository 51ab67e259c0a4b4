"""Which subscriptions look for held acks when their topic loads (issue 45): a metadata scan
per durable subscription at every topic load was paid by topics that never saw a transaction."""

from __future__ import annotations

from magnetar.broker.transactions import PENDING_ACKS_PROPERTY
from magnetar.broker.transactions.pending_ack import may_hold
from magnetar.storage import ManagedLedgerFactory


def test_only_marked_topics_and_what_an_earlier_version_left_are_looked_at(tmp_path):
    with ManagedLedgerFactory(tmp_path) as factory:
        store = factory.metadata_store
        # A record as the previous version left it: no mark on its topic.
        store.put("/transactions/pending-ack/tenant/ns/old/s/1:2", b"[[3, 4]]")
        old, fresh = factory.open("tenant/ns/old"), factory.open("tenant/ns/fresh")
        assert may_hold(store, old, "s")
        assert not may_hold(store, old, "other")
        assert not may_hold(store, fresh, "s")
        fresh.set_property(PENDING_ACKS_PROPERTY, "1")  # its first transactional ack
        assert may_hold(store, fresh, "s") and may_hold(store, fresh, "other")

    with ManagedLedgerFactory(tmp_path) as factory:  # the next run: the scan is not made again
        store = factory.metadata_store
        store.delete("/transactions/pending-ack/tenant/ns/old/s/1:2")
        store.put("/transactions/pending-ack/tenant/ns/late/s/1:2", b"[[3, 4]]")
        assert may_hold(store, factory.open("tenant/ns/old"), "s")
        assert not may_hold(store, factory.open("tenant/ns/late"), "s")
        assert may_hold(store, factory.open("tenant/ns/fresh"), "s")
