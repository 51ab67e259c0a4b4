"""What topics, subscriptions and dispatchers use of a client's connection (Pulsar's
TransportCnx): a few ways to send, whether it can take more, and who is on the other
end. transport.connection.ServerCnx is the one implementation; the topics layer names
only this, so it never imports the transport above it. For annotations only: nothing
checks a connection against it at run time, on the publish and dispatch paths least of all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer, DispatchEntry
    from magnetar.broker.topics.producer import Producer


class TransportCnx(Protocol):
    id: int
    remote: str
    """The client's address, for stats and logs."""
    writable: bool
    """False while the socket's buffer is over its high-water mark: dispatch waits."""
    repl_dedup_by_position: bool
    """The client announced `supports_repl_dedup_by_lid_and_eid`: its replicator producers are
    deduplicated by source position (deduplication)."""
    read_at: float
    """When (time.monotonic) the read of the socket being handled arrived: where a SEND's
    publish latency starts."""

    @property
    def role(self) -> str | None:
        """The authenticated role (None when authentication is off)."""

    def send(self, frame: bytes) -> None: ...

    def send_message(self, consumer_id: int, partition: int, entry: DispatchEntry) -> None: ...

    def send_reached_end_of_topic(self, consumer_id: int) -> None: ...

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None: ...

    def tell_producer_closed(self, producer: Producer) -> None:
        """The broker closed `producer`: forget it and tell the client."""

    def recall_producer(self, producer_id: int) -> None:
        """A producer the broker refused (held) may come back now: tell its client."""

    def tell_consumer_closed(self, consumer: Consumer) -> None:
        """The broker closed `consumer`: forget it and tell the client."""
