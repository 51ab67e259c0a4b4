"""Replicated subscriptions (PIP-33): a subscription's position mirrored to the topic's
other clusters, so a consumer that fails over resumes near where it was.

Positions differ between clusters (each has its own ledger), so the broker maps them with
snapshots made of marker entries written into the topic and replicated like data:

1. Every `replicatedSubscriptionsSnapshotFrequencyMillis`, a topic with a replicated
   subscription and new data asks the other clusters for their last position (a REQUEST
   marker); each answers with a RESPONSE marker sent back to it only. With more than one
   remote, a second round follows, so what the remotes exchanged meanwhile is covered.
2. When every remote answered, the topic stores a SNAPSHOT marker (kept here): "whoever has
   consumed up to the last RESPONSE here has consumed each remote up to its answer".
3. Each replicated subscription keeps the snapshots ahead of its mark-delete position; once
   the mark-delete position passes one, an UPDATE marker carries the remote positions to
   every cluster, whose broker moves the same-named subscription there, only forward.

Markers are acted on only when they come in from the cluster that replicated them, read by
the replicator to that cluster (`replicated_from` names it), as Pulsar does; a producer that
is not a replicator cannot store one at all (broker.transport.publish_checks). Consumers
never receive them: the dispatcher steps over every marker, and the controller acknowledges
each one on every subscription as soon as it is stored or read, so they are no backlog.
"""
