"""The broker: Pulsar's binary protocol served from managed-ledger storage.

Layered as Pulsar's broker is, highest first (docs/architecture.md draws it):

- service/: BrokerService builds and wires everything and owns the topic registry;
  nothing below imports it.
- transport/ (connections, commands, lookups) and monitors/ (timers and watchers acting
  on loaded topics), which do not import each other.
- topics/: topics, subscriptions, producers, consumers, dispatchers (persistent/,
  nonpersistent/), seeing the broker through topics.context and a connection through
  topics.cnx.
- features, which do not import each other: auth/, tls, entry_filters/,
  delayed_delivery/, compaction/, entry_metadata, deduplication.
- policies/ (tenants, namespaces, what applies to a topic), config/ (the settings),
  errors.

A module imports only from its own layer and those below, annotations included: where a
lower layer needs a few members of a higher one it declares them (a Protocol, or the
context object the service builds). The import-linter contract "broker-layers" in
pyproject.toml checks it.
"""
