"""The transport layer's two narrow interfaces, for annotations only.

`Broker` is what a connection asks of the broker it belongs to: settings, security,
the connection limits, and the topic registry's lookups. service.BrokerService is the
one implementation; the transport names only this, so it never imports the service
above it. `CommandHost` is what the command handlers kept beside the connection
(consumer_commands, lookup_commands) use of it, besides what topics use (TransportCnx):
ServerCnx is the one implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from magnetar.broker.topics.cnx import TransportCnx

if TYPE_CHECKING:
    from magnetar.broker.auth.authentication import AuthenticationService
    from magnetar.broker.auth.authorization import AuthorizationService
    from magnetar.broker.auth.operations import Operation
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.schema_registry import SchemaRegistryService
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.full_disk import FullDisk
    from magnetar.broker.topics.nonpersistent.non_persistent_topic import NonPersistentTopic
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
    from magnetar.broker.transactions.coordinator import TransactionCoordinator
    from magnetar.broker.transport.advertised_listeners import AdvertisedListener, AdvertisedListeners
    from magnetar.broker.transport.connection_controller import ConnectionController, PartialFrameBudget
    from magnetar.broker.transport.topic_list import TopicsPattern
    from magnetar.wire.topic_name import TopicName


class Broker(Protocol):
    config: ServiceConfiguration
    authentication: AuthenticationService
    authorization: AuthorizationService
    connection_controller: ConnectionController
    frame_budget: PartialFrameBudget
    connections: set[object]
    """The open connections, which the broker closes when it stops."""
    listeners: AdvertisedListeners
    schemas: SchemaRegistryService
    full_disk: FullDisk
    transactions: TransactionCoordinator | None
    """The transaction coordinator, when transactionCoordinatorEnabled."""
    protocol_listeners: dict[str, list[str]]
    """Where each protocol handler listens (`kafka` -> its listener URLs), to tell a client
    of that protocol that came to the Pulsar port where to go."""

    def generate_producer_name(self) -> str: ...

    def parse_topic(self, name: str) -> TopicName: ...

    def get_topic(self, name: str, *, create: bool = True) -> PersistentTopic | NonPersistentTopic: ...

    def topic_exists(self, topic: TopicName) -> bool: ...

    def partitioned_metadata(self, name: str, *, auto_create: bool = True) -> int: ...

    def is_coordinator_topic(self, name: str) -> bool: ...

    def topics_of_namespace(self, namespace: str, pattern: TopicsPattern | None = None, *,
                            mode: int = ...) -> list[str]: ...


class CommandHost(TransportCnx, Protocol):
    service: Broker
    consumers: dict[int, Consumer]
    remote: str
    lookup_listener: AdvertisedListener | None

    def authorize(self, operation: Operation, topic: str | None = None, namespace: str | None = None) -> None: ...

    def withdraw(self, kind: str, ident: int) -> None: ...
