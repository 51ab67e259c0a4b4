"""Transactions (PIP-31): the coordinator and its durable log, and each topic's buffer.

A feature of the broker: it imports policies and below, never another feature, topics or
the service (the coordinator ends transactions through its Participants protocol, which
the service implements). Nothing here is imported unless `transactionCoordinatorEnabled`
is set or a topic that held transactions is loaded.
"""
