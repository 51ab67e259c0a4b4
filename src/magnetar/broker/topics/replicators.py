"""What a topic knows of the replicators reading it (geo-replication, docs/scaling.md).

A replicator is a client inside the broker: it reads the topic through a durable cursor
named `<replicatorPrefix>.<remote cluster>` and produces what it reads to the remote
cluster. It is built above the broker (magnetar.replication), so the topic sees it only
through this Protocol: its stats, its backlog (what the inactivity monitor must not throw
away) and a way to stop it when the topic closes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from magnetar.broker.policies.topic_policies import Policy

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.wire.topic_name import TopicName

#: Pulsar's `replicatorDispatchRate` of a topic and of a namespace (Pulsar keeps one a cluster
#: in the namespace's Policies; magnetar keeps the one rate, for every remote): each of a
#: topic's replicators sends at most this many messages and bytes a period. Broker defaults:
#: dispatchThrottlingRatePerReplicatorInMsg / InByte.
REPLICATOR_DISPATCH_RATE = Policy("replicatorDispatchRate", "replicatorDispatchRate", "")
MESSAGES, BYTES, PERIOD = "dispatchThrottlingRateInMsg", "dispatchThrottlingRateInByte", "ratePeriodInSecond"


class TopicReplicator(Protocol):
    def stats(self) -> dict[str, object]:
        """Pulsar's ReplicatorStats (connected, replicationBacklog, msgRateOut, ...)."""
        ...

    def backlog(self) -> int:
        """Entries written to the topic and not yet received by the remote cluster."""
        ...

    def close(self) -> None:
        """Stop replicating (the topic closes); the cursor keeps where it was."""
        ...

    def sample(self, now: float) -> None:
        """Work out rates at the broker's stats interval, as topics do."""
        ...


def has_replicator_prefix(name: str, prefix: str) -> bool:
    """A replicator's cursor (not a subscription) or producer (another cluster's replicator):
    Pulsar tells them apart by the prefix."""
    return name.startswith(prefix + ".")


def replicator_cursor_name(prefix: str, remote: str) -> str:
    """Pulsar's name of the cursor replicating to `remote`: `pulsar.repl.<remote>`."""
    return f"{prefix}.{remote}"


def replicator_dispatch_rate(policies: TopicPolicies, config: ServiceConfiguration,
                             topic: TopicName) -> tuple[float, float]:
    """Messages and bytes a second each replicator of `topic` sends at most (0: no limit):
    the topic's policy, else its namespace's, else the broker's keys; -1 or 0 lifts a half."""
    value = policies.configured(topic, REPLICATOR_DISPATCH_RATE)
    if value is None:
        return (max(config.dispatchThrottlingRatePerReplicatorInMsg, 0),
                max(config.dispatchThrottlingRatePerReplicatorInByte, 0))
    period = max(int(value.get(PERIOD, 1)), 1)
    return max(int(value.get(MESSAGES, -1)), 0) / period, max(int(value.get(BYTES, -1)), 0) / period

