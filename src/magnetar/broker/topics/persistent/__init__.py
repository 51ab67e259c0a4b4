"""Persistent topics: PersistentTopic over its managed ledger, PersistentSubscription over
its cursor, the dispatchers (Exclusive/Failover, Shared, Key_Shared), compacted reads, the
entry-filter gate, and the rules that act on a topic's backlog (TTL, backlog quotas).

Layer rule: as topics/ (never transport, monitors or service); imports topics/ but not
nonpersistent/.
"""
