"""Geo-replication: a broker's topics copied to other clusters as Pulsar copies them.

A replicator is a Pulsar client inside the broker. Per topic and remote cluster it reads
the topic through a durable cursor (`pulsar.repl.<remote>`) and produces each entry, its
batch payload untouched, to the remote cluster's broker over the ordinary binary protocol
as producer `pulsar.repl.<local>--><remote>`, with `replicated_from` set so no cluster sends
it on again. The cursor moves only on the remote's receipt, so a remote that is down costs
no memory: the ledger holds the backlog until it returns.

Layer rule: above the broker and the client, beside admin and kafka (it imports both, and
nothing imports it but the standalone that starts it).
"""

from magnetar.replication.service import ReplicationService

__all__ = ["ReplicationService"]
