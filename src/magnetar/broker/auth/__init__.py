"""Authentication and authorization under Pulsar's keys (see authentication, session,
authorization).

Layer rule: a feature; imports policies, config and errors, never another feature nor
topics, transport, monitors or service.
"""
