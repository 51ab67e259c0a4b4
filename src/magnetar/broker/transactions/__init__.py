"""Transactions (PIP-31): the coordinator and its durable log, and each topic's buffer.

A feature of the broker: it imports policies and below, never another feature, topics or
the service (the coordinator ends transactions through its Participants protocol, which
the service implements). Nothing here is imported unless `transactionCoordinatorEnabled`
is set or a topic that held transactions is loaded (this package's own module holds only
the property that says so, read when any topic loads).
"""

#: The managed-ledger property of a topic that has held transactional messages: only such a
#: topic has a transaction buffer (buffer.py), rebuilt from its entries when it is opened.
TRANSACTIONS_PROPERTY = "#magnetar.transactions"

#: The managed-ledger property of a topic one of whose subscriptions has acknowledged in a
#: transaction: only such a topic's subscriptions look for held acks when they load
#: (pending_ack.py), so a topic that never saw one pays no metadata scan per subscription.
PENDING_ACKS_PROPERTY = "#magnetar.pending-acks"
