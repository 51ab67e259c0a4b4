"""What a topic knows of the replicators reading it (geo-replication, docs/scaling.md).

A replicator is a client inside the broker: it reads the topic through a durable cursor
named `<replicatorPrefix>.<remote cluster>` and produces what it reads to the remote
cluster. It is built above the broker (magnetar.replication), so the topic sees it only
through this Protocol: its stats, its backlog (what the inactivity monitor must not throw
away) and a way to stop it when the topic closes.
"""

from __future__ import annotations

from typing import Protocol


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
