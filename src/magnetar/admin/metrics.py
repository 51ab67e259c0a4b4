"""`/metrics` in Prometheus text format, under the names Pulsar's brokers export.

Every loaded topic is shown, non-persistent ones while they exist, and the broker loads
every stored topic at start-up, so a subscription's backlog is visible right after a
restart. Counters run from the moment
the topic was loaded, as in Pulsar; rates cover the last `statsUpdateFrequencyInSecs`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from magnetar.broker.policies.backlog_quota import SIZE, effective_quotas
from magnetar.broker.service.loop_lag import LAG_BOUNDS_S, PROBE_INTERVAL_S, LoopLagProbe
from magnetar.broker.topics.abstract_subscription import AbstractSubscription
from magnetar.broker.topics.abstract_topic import AbstractTopic
from magnetar.broker.topics.latency import ENTRY_LATENCY_SUFFIXES, EntryLatencyBuckets, LatencySummary
from magnetar.broker.topics.persistent.backlog import backlog_bytes
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
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

#: Of persistent topics only: what their backlog quota is measured by (Pulsar's names), so a
#: dashboard warns of a quota nearly reached before producers are held.
PERSISTENT_TOPIC_FAMILIES = (
    Family("pulsar_storage_backlog_size", "gauge", "Estimated bytes of the slowest durable subscription's backlog.",
           backlog_bytes),
    Family("pulsar_storage_backlog_quota_limit", "gauge", "Bytes the topic's backlog quota allows (-1: no limit).",
           lambda t: effective_quotas(t.context.config, t.context.policies, t.name)[SIZE].limit_size),
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


def lines(topics: Iterable[AbstractTopic], cache: EntryCache, publish: LatencySummary, loop_lag: LoopLagProbe, *,
          writable: bool = True, cluster: str = "standalone", disk: tuple[int, int] | None = None) -> Iterator[str]:
    """Every family, each with its HELP and TYPE lines followed by one sample per topic (or
    per subscription, or replicator), after the broker-wide ones.

    A generator, so that the page of a broker with many topics (megabytes at 10,000) is
    written a slice at a time between other clients' work rather than in one turn of the
    event loop; each topic's and subscription's label text is made once, not once a family.

    `pulsar_broker_storage_writable` is 0 while the data dir's disk is full: the broker-wide
    prefix of Pulsar's aggregated broker metrics (pulsar_broker_storage_size, ...), valued as
    BookKeeper's bookie_SERVER_STATUS (1 writable, 0 read-only), the gauge a Pulsar operator
    already alerts on for a full bookie disk."""
    topics = sorted(topics, key=lambda t: str(t.name))
    broker_labels = label_text([("cluster", cluster)])
    yield from (
        "# HELP pulsar_ml_cache_used_size Bytes the entry cache holds, overhead included "
        "(bounded by managedLedgerCacheSizeMB).",
        "# TYPE pulsar_ml_cache_used_size gauge",
        f"pulsar_ml_cache_used_size{{{broker_labels}}} {cache.size_bytes}",
        "# HELP pulsar_broker_storage_writable 1 while the broker's disk takes writes, 0 while it is full "
        "(producers held, /admin/v2/brokers/health failing).",
        "# TYPE pulsar_broker_storage_writable gauge",
        f"pulsar_broker_storage_writable{{{broker_labels}}} {int(writable)}",
    )
    if disk is not None:
        yield from _disk_lines(broker_labels, *disk)
    labelled = _Labels()
    for family in TOPIC_FAMILIES:
        yield from _family_head(family.name, family.kind, family.help)
        for t in topics:
            yield f"{family.name}{{{labelled.topic(t)}}} {number_text(family.value(t))}"
    persistent = [t for t in topics if isinstance(t, PersistentTopic)]
    for family in PERSISTENT_TOPIC_FAMILIES:
        yield from _family_head(family.name, family.kind, family.help)
        for t in persistent:
            yield f"{family.name}{{{labelled.topic(t)}}} {number_text(family.value(t))}"
    subscriptions = [(t, s) for t in topics for _, s in sorted(t.subscriptions.items())]
    for family in SUBSCRIPTION_FAMILIES:
        yield from _family_head(family.name, family.kind, family.help)
        for t, s in subscriptions:
            yield f"{family.name}{{{labelled.subscription(t, s)}}} {number_text(family.value(s))}"
    replicators = [(t, remote, replicator.stats()) for t in topics
                   for remote, replicator in sorted(getattr(t, "replicators", {}).items())]
    for family in REPLICATION_FAMILIES:
        yield from _family_head(family.name, family.kind, family.help)
        for t, remote, stats in replicators:
            yield (f"{family.name}{{{labelled.topic(t)},{label_text([('remote_cluster', remote)])}}} "
                   f"{number_text(family.value(stats))}")
    yield from _publish_latency_lines(broker_labels, publish)
    yield from _storage_write_lines(topics, labelled)
    yield from _loop_lag_lines(broker_labels, loop_lag)
    yield from collector_lines(broker_labels)


def _family_head(name: str, kind: str, help_text: str) -> tuple[str, str]:
    return f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"


class _Labels:
    """Label text by topic and subscription, made on first use in one page and kept for the
    rest of it (objects as keys: the page's topic list keeps them alive)."""

    def __init__(self) -> None:
        self._topics: dict[int, str] = {}
        self._subscriptions: dict[int, str] = {}

    def topic(self, topic: AbstractTopic) -> str:
        text = self._topics.get(id(topic))
        if text is None:
            text = self._topics[id(topic)] = label_text(_topic_labels(topic))
        return text

    def subscription(self, topic: AbstractTopic, subscription: AbstractSubscription) -> str:
        text = self._subscriptions.get(id(subscription))
        if text is None:
            text = f"{self.topic(topic)},{label_text([('subscription', subscription.name)])}"
            self._subscriptions[id(subscription)] = text
        return text


def _publish_latency_lines(cluster: str, publish: LatencySummary) -> list[str]:
    lines = ["# HELP pulsar_broker_publish_latency Milliseconds from a SEND read to its receipt written "
             "(quantiles of the last stats interval and the current one; count and sum since start).",
             "# TYPE pulsar_broker_publish_latency summary"]
    lines += [f'pulsar_broker_publish_latency{{{cluster},quantile="{q}"}} {number_text(round(ms, 3))}'
              for q, ms in publish.quantiles()]
    return [*lines, f"pulsar_broker_publish_latency_count{{{cluster}}} {publish.count}",
            f"pulsar_broker_publish_latency_sum{{{cluster}}} {number_text(round(publish.sum, 3))}"]


def _storage_write_lines(topics: list[AbstractTopic], labelled: _Labels) -> Iterator[str]:
    """Per persistent topic, entries by milliseconds from append to fsynced over the last
    stats interval: `le_X` counts those over the next smaller bound and up to X, as
    Pulsar's buckets do (not cumulative); `overflow` those over a second."""
    stored = [t for t in topics if isinstance(t, PersistentTopic)]
    values: list[tuple[str, Callable[[EntryLatencyBuckets], object]]] = [
        *((f"le_{suffix}", lambda b, i=i: b.last[i]) for i, suffix in enumerate(ENTRY_LATENCY_SUFFIXES)),
        ("count", lambda b: sum(b.last)), ("sum", lambda b: number_text(round(b.last_sum, 3)))]
    for suffix, value in values:
        name = f"pulsar_storage_write_latency_{suffix}"
        yield from _family_head(name, "gauge", "Entries by milliseconds from append to fsynced, last stats interval.")
        for t in stored:
            yield f"{name}{{{labelled.topic(t)}}} {value(t.storage_write_latency)}"


def _loop_lag_lines(cluster: str, loop_lag: LoopLagProbe) -> list[str]:
    lines = [f"# HELP magnetar_event_loop_lag_seconds How late the event loop ran a timer that was due (a probe "
             f"every {PROBE_INTERVAL_S * 1000:g} ms): every client's work waited as long.",
             "# TYPE magnetar_event_loop_lag_seconds histogram"]
    cumulative = 0
    for bound, count in zip([*map(repr, LAG_BOUNDS_S), "+Inf"], loop_lag.counts, strict=True):
        cumulative += count
        lines.append(f'magnetar_event_loop_lag_seconds_bucket{{{cluster},le="{bound}"}} {cumulative}')
    return [*lines, f"magnetar_event_loop_lag_seconds_count{{{cluster}}} {loop_lag.count}",
            f"magnetar_event_loop_lag_seconds_sum{{{cluster}}} {number_text(round(loop_lag.sum, 6))}",
            "# HELP magnetar_event_loop_lag_max_seconds The longest event-loop lag of the last stats interval "
            "and the current one.",
            "# TYPE magnetar_event_loop_lag_max_seconds gauge",
            f"magnetar_event_loop_lag_max_seconds{{{cluster}}} {number_text(round(loop_lag.max_seconds, 6))}"]


def _topic_labels(topic: AbstractTopic) -> list[tuple[str, str]]:
    return [("cluster", topic.context.config.clusterName), ("namespace", topic.name.namespace_name),
            ("topic", str(topic.name))]


def _disk_lines(cluster: str, total: int, free: int) -> tuple[str, ...]:
    """The data directory's disk (size, free bytes), so a dashboard (the web console's
    overview) warns before it fills: magnetar's own gauges, as Pulsar's broker has none for
    BookKeeper's disks."""
    return (
        "# HELP magnetar_storage_disk_size_bytes Size of the disk holding the broker's data directory.",
        "# TYPE magnetar_storage_disk_size_bytes gauge",
        f"magnetar_storage_disk_size_bytes{{{cluster}}} {total}",
        "# HELP magnetar_storage_disk_free_bytes Bytes free on the disk holding the broker's data directory.",
        "# TYPE magnetar_storage_disk_free_bytes gauge",
        f"magnetar_storage_disk_free_bytes{{{cluster}}} {free}",
    )


def collector_lines(cluster: str) -> list[str]:
    """Python's cyclic collector by generation, under the names Prometheus' Python client gives
    them. A collection runs on the event loop: objects a request path leaves in reference
    cycles are freed only by one, so collections that keep coming under steady traffic, each
    freeing thousands of objects, point at such a path and at the stalls it costs."""
    stats = gc.get_stats()
    lines: list[str] = []
    for name, key, help_text in (
            ("python_gc_collections_total", "collections", "Collections of each generation since start."),
            ("python_gc_objects_collected_total", "collected", "Objects collections of each generation freed.")):
        lines += _family_head(name, "counter", help_text)
        lines += [f'{name}{{{cluster},generation="{generation}"}} {figures[key]}'
                  for generation, figures in enumerate(stats)]
    return lines

