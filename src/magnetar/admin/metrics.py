"""`/metrics` in Prometheus text format, under the names Pulsar's brokers export.

Every loaded topic is shown, non-persistent ones while they exist, and the broker loads
every stored topic at start-up, so a subscription's backlog is visible right after a
restart. Counters run from the moment
the topic was loaded, as in Pulsar; rates cover the last `statsUpdateFrequencyInSecs`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from magnetar.broker.topics.abstract_subscription import AbstractSubscription
from magnetar.broker.topics.abstract_topic import AbstractTopic
from magnetar.prometheus import label_text, number_text
from magnetar.storage.entry_cache import EntryCache


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    kind: str
    help: str
    value: Callable[..., float]


TOPIC_FAMILIES = (
    Family("pulsar_subscriptions_count", "gauge", "Subscriptions of the topic.", lambda t: len(t.subscriptions)),
    Family("pulsar_producers_count", "gauge", "Producers connected to the topic.", lambda t: len(t.producers)),
    Family("pulsar_consumers_count", "gauge", "Consumers connected to the topic.",
           lambda t: sum(len(s.consumers) for s in t.subscriptions.values())),
    Family("pulsar_rate_in", "gauge", "Messages published per second.", lambda t: t.inbound.message_rate),
    Family("pulsar_rate_out", "gauge", "Messages dispatched per second.", lambda t: t.outbound.message_rate),
    Family("pulsar_throughput_in", "gauge", "Bytes published per second.", lambda t: t.inbound.byte_rate),
    Family("pulsar_throughput_out", "gauge", "Bytes dispatched per second.", lambda t: t.outbound.byte_rate),
    Family("pulsar_in_messages_total", "counter", "Messages published since the topic was loaded.",
           lambda t: t.inbound.messages),
    Family("pulsar_in_bytes_total", "counter", "Bytes published since the topic was loaded.",
           lambda t: t.inbound.bytes),
    Family("pulsar_out_messages_total", "counter", "Messages dispatched since the topic was loaded.",
           lambda t: t.outbound.messages),
    Family("pulsar_out_bytes_total", "counter", "Bytes dispatched since the topic was loaded.",
           lambda t: t.outbound.bytes),
    Family("pulsar_storage_size", "gauge", "Bytes the topic's ledgers take on disk.",
           lambda t: t.storage_size()),
    Family("pulsar_msg_backlog", "gauge", "Unacknowledged entries, summed over the topic's subscriptions.",
           lambda t: sum(s.backlog() for s in t.subscriptions.values())),
)

SUBSCRIPTION_FAMILIES = (
    Family("pulsar_subscription_back_log", "gauge", "Unacknowledged entries of the subscription.",
           lambda s: s.backlog()),
    Family("pulsar_subscription_delayed", "gauge", "Messages held back for delayed delivery.",
           lambda s: s.delayed_messages),
    Family("pulsar_subscription_unacked_messages", "gauge", "Messages delivered and not yet acknowledged.",
           lambda s: sum(c.unacked_messages for c in s.consumers)),
    Family("pulsar_subscription_msg_rate_out", "gauge", "Messages dispatched per second.",
           lambda s: s.outbound.message_rate),
    Family("pulsar_subscription_msg_throughput_out", "gauge", "Bytes dispatched per second.",
           lambda s: s.outbound.byte_rate),
    *(Family(f"pulsar_subscription_filter_{what}_msg_count", "counter", f"Messages entry filters {verb}.",
             lambda s, field=field: getattr(s.filter_counters, field))
      for what, verb, field in (("processed", "judged", "processed"), ("accepted", "accepted", "accepted"),
                                ("rejected", "rejected", "rejected"), ("rescheduled", "rescheduled", "rescheduled"))),
)

#: Per topic and remote cluster, read from the replicator's stats (Pulsar's names, label remote_cluster).
REPLICATION_FAMILIES = (
    Family("pulsar_replication_rate_in", "gauge", "Messages per second the remote cluster's replicator publishes.",
           lambda r: r["msgRateIn"]),
    Family("pulsar_replication_rate_out", "gauge", "Messages per second replicated to the remote cluster.",
           lambda r: r["msgRateOut"]),
    Family("pulsar_replication_throughput_in", "gauge", "Bytes per second the remote cluster's replicator publishes.",
           lambda r: r["msgThroughputIn"]),
    Family("pulsar_replication_throughput_out", "gauge", "Bytes per second replicated to the remote cluster.",
           lambda r: r["msgThroughputOut"]),
    Family("pulsar_replication_backlog", "gauge", "Entries not yet received by the remote cluster.",
           lambda r: r["replicationBacklog"]),
    Family("pulsar_replication_connected_count", "gauge", "1 while the replicator's producer is connected.",
           lambda r: int(r["connected"])),
    Family("pulsar_replication_delay_in_seconds", "gauge", "Age of the oldest message not yet replicated.",
           lambda r: r["replicationDelayInSeconds"]),
)


def render(topics: Iterable[AbstractTopic], cache: EntryCache, *, writable: bool = True, cluster: str = "standalone"
           ) -> str:
    """All families, each with its HELP and TYPE lines followed by one sample per topic
    (or per subscription), after the broker-wide ones.

    `pulsar_broker_storage_writable` is 0 while the data dir's disk is full: the broker-wide
    prefix of Pulsar's aggregated broker metrics (pulsar_broker_storage_size, ...), valued as
    BookKeeper's bookie_SERVER_STATUS (1 writable, 0 read-only), the gauge a Pulsar operator
    already alerts on for a full bookie disk."""
    topics = sorted(topics, key=lambda t: str(t.name))
    broker_labels = label_text([("cluster", cluster)])
    lines = [
        "# HELP pulsar_ml_cache_used_size Bytes the entry cache holds, overhead included "
        "(bounded by managedLedgerCacheSizeMB).",
        "# TYPE pulsar_ml_cache_used_size gauge",
        f"pulsar_ml_cache_used_size{{{broker_labels}}} {cache.size_bytes}",
        "# HELP pulsar_broker_storage_writable 1 while the broker's disk takes writes, 0 while it is full "
        "(producers held, /admin/v2/brokers/health failing).",
        "# TYPE pulsar_broker_storage_writable gauge",
        f"pulsar_broker_storage_writable{{{broker_labels}}} {int(writable)}",
    ]
    for family in TOPIC_FAMILIES:
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}"]
        lines += [f"{family.name}{{{label_text(_topic_labels(t))}}} {number_text(family.value(t))}" for t in topics]
    subscriptions = [(t, s) for t in topics for _, s in sorted(t.subscriptions.items())]
    for family in SUBSCRIPTION_FAMILIES:
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}"]
        lines += [f"{family.name}{{{label_text(_subscription_labels(t, s))}}} {number_text(family.value(s))}"
                  for t, s in subscriptions]
    replicators = [(t, remote, replicator.stats()) for t in topics
                   for remote, replicator in sorted(getattr(t, "replicators", {}).items())]
    for family in REPLICATION_FAMILIES:
        lines += [f"# HELP {family.name} {family.help}", f"# TYPE {family.name} {family.kind}"]
        lines += [f"{family.name}{{{label_text([*_topic_labels(t), ('remote_cluster', remote)])}}} "
                  f"{number_text(family.value(stats))}" for t, remote, stats in replicators]
    return "\n".join(lines) + "\n"


def _topic_labels(topic: AbstractTopic) -> list[tuple[str, str]]:
    return [("cluster", topic.context.config.clusterName), ("namespace", topic.name.namespace_name),
            ("topic", str(topic.name))]


def _subscription_labels(topic: AbstractTopic, subscription: AbstractSubscription) -> list[tuple[str, str]]:
    return [*_topic_labels(topic), ("subscription", subscription.name)]
