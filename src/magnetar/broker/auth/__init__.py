"""Authentication and authorization under Pulsar's keys (see authentication, session,
authorization)."""
