"""What the monitors use of the broker: its loaded topics and the few members that act
on them. service.BrokerService is the one implementation; the monitors name only this,
so they never import the service above them. For annotations only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
    from magnetar.storage import ManagedLedgerFactory
    from magnetar.wire.topic_name import TopicName


class TopicRegistry(Protocol):
    config: ServiceConfiguration
    policies: TopicPolicies
    factory: ManagedLedgerFactory
    """Whose trimmer thread retention trims on."""

    @property
    def topics(self) -> Mapping[str, PersistentTopic]:
        """The loaded persistent topics, by name."""

    def delete_topic(self, name: TopicName, *, force: bool = False) -> None: ...
