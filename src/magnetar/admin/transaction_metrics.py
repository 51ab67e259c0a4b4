"""Transactions in `/metrics`, under the names Pulsar's brokers export (PIP-31).

The coordinator's families (labels cluster, coordinator_id) only while
`transactionCoordinatorEnabled` is on; a topic's transaction-buffer families only for
topics that have held transactions, and a subscription's pending-ack families only for
subscriptions a transaction acknowledged on. Nothing of the transactions package is
imported here: a broker without transactions renders nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from magnetar.prometheus import label_text

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_topic import AbstractTopic
    from magnetar.broker.transactions.coordinator import TransactionCoordinator

#: Pulsar's suffixes of pulsar_txn_execution_latency_le_*, the coordinator's bucket bounds in ms.
_LATENCY_SUFFIXES = ("10", "20", "50", "100", "500", "1000", "5000", "15000", "30000", "60000", "300000",
                     "1500000", "3000000", "overflow")

_COORDINATOR: tuple[tuple[str, str, str, Callable[[TransactionCoordinator], int]], ...] = (
    ("pulsar_txn_active_count", "gauge", "Transactions open or ending.", lambda c: c.active_count),
    ("pulsar_txn_created_total", "counter", "Transactions opened since the broker started.",
     lambda c: c.stats.created),
    ("pulsar_txn_committed_total", "counter", "Transactions committed since the broker started.",
     lambda c: c.stats.committed),
    ("pulsar_txn_aborted_total", "counter", "Transactions aborted (timed-out ones too) since the broker started.",
     lambda c: c.stats.aborted),
    ("pulsar_txn_timeout_total", "counter", "Transactions the broker aborted at their timeout since it started.",
     lambda c: c.stats.timed_out),
    ("pulsar_txn_append_log_total", "counter", "Commits of the transaction log (many records share one).",
     lambda c: c.log.appends),
)

_BUFFER: tuple[tuple[str, str, str, Callable[[Any], int]], ...] = (
    ("pulsar_txn_tb_active_total", "gauge", "Open transactions with messages in the topic.",
     lambda b: len(b.ongoing)),
    ("pulsar_txn_tb_committed_total", "counter", "Transactions committed in the topic since it loaded.",
     lambda b: b.committed_count),
    ("pulsar_txn_tb_aborted_total", "counter", "Transactions aborted in the topic since it loaded.",
     lambda b: b.aborted_count),
)

_PENDING_ACK: tuple[tuple[str, str, str, Callable[[Any], int]], ...] = (
    ("pulsar_txn_tp_committed_count_total", "counter",
     "Transactions that acknowledged on the subscription and committed, since it loaded.",
     lambda p: p.committed_count),
    ("pulsar_txn_tp_aborted_count_total", "counter",
     "Transactions that acknowledged on the subscription and aborted, since it loaded.",
     lambda p: p.aborted_count),
)


def lines(coordinator: TransactionCoordinator | None, topics: Iterable[AbstractTopic], cluster: str) -> Iterator[str]:
    if coordinator is not None:
        labels = label_text([("cluster", cluster), ("coordinator_id", str(coordinator.coordinator_id))])
        for name, kind, text, value in _COORDINATOR:
            yield from (f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value(coordinator)}")
        for suffix, count in zip(_LATENCY_SUFFIXES, coordinator.stats.latency_buckets, strict=True):
            name = f"pulsar_txn_execution_latency_le_{suffix}"
            yield from (f"# HELP {name} Transactions ended, by milliseconds from opened to ended, since the broker "
                        "started (each bucket counts those above the previous bound).",
                        f"# TYPE {name} gauge", f"{name}{{{labels}}} {count}")
    topics = sorted(topics, key=lambda t: str(t.name))
    buffers = [(t, buffer) for t in topics if (buffer := getattr(t, "transaction_buffer", None)) is not None]
    for name, kind, text, value in _BUFFER if buffers else ():
        yield from (f"# HELP {name} {text}", f"# TYPE {name} {kind}")
        yield from (f"{name}{{{_labels(cluster, t)}}} {value(b)}" for t, b in buffers)
    pending = [(t, sub, held) for t in topics for _, sub in sorted(t.subscriptions.items())
               if (held := getattr(sub, "pending_acks", None)) is not None]
    for name, kind, text, value in _PENDING_ACK if pending else ():
        yield from (f"# HELP {name} {text}", f"# TYPE {name} {kind}")
        yield from (f"{name}{{{_labels(cluster, t, sub.name)}}} {value(p)}" for t, sub, p in pending)


def _labels(cluster: str, topic: AbstractTopic, subscription: str | None = None) -> str:
    labels = [("cluster", cluster), ("namespace", topic.name.namespace_name), ("topic", str(topic.name))]
    if subscription is not None:
        labels.append(("subscription", subscription))
    return label_text(labels)
