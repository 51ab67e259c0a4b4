"""The policies set over REST on a namespace and on a topic, in one table: each policy, the
path it has under each (Pulsar names some differently, `maxProducersPerTopic` on a namespace
and `maxProducers` on a topic; some exist under one only) and the check of its value, which
both routes and a namespace's creation body share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from magnetar.admin.responses import (
    Validator,
    boolean,
    delayed_delivery_policies,
    dispatch_rate,
    entry_filter_policy,
    fail,
    non_negative_int,
    non_negative_number,
    publish_rate,
    schema_compatibility_strategy,
)
from magnetar.broker.compaction import COMPACTION_THRESHOLD
from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.deduplication import DEDUPLICATION
from magnetar.broker.entry_filters.policy import ENTRY_FILTERS
from magnetar.broker.policies.topic_policies import MESSAGE_TTL, Policy
from magnetar.broker.schema_registry import SCHEMA_AUTO_UPDATE, SCHEMA_COMPATIBILITY, SCHEMA_VALIDATION_ENFORCED
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.publish_rate import PUBLISH_RATE
from magnetar.broker.topics.replicators import REPLICATOR_DISPATCH_RATE
from magnetar.broker.topics.topic_limits import (
    DELAYED_DELIVERY,
    ENCRYPTION_REQUIRED,
    MAX_CONSUMERS,
    MAX_CONSUMERS_PER_SUBSCRIPTION,
    MAX_MESSAGE_SIZE,
    MAX_PRODUCERS,
    MAX_UNACKED_PER_CONSUMER,
    SUBSCRIPTION_EXPIRATION,
)


@dataclass(frozen=True, slots=True)
class PolicyRoute:
    """One policy: its path under `{namespace}/` and under `{topic}/` (None: no such route;
    a topic's message TTL has routes of its own) and the check of a value given for it."""

    policy: Policy
    namespace_path: str | None
    topic_path: str | None
    valid: Validator


def policy_table(service: BrokerService) -> list[PolicyRoute]:
    filters = entry_filter_policy(service.entry_filter_provider)
    return [
        PolicyRoute(MESSAGE_TTL, "messageTTL", None, non_negative_int),
        PolicyRoute(DEDUPLICATION, "deduplication", "deduplicationEnabled", boolean),
        PolicyRoute(ENTRY_FILTERS, "entryFilters", "entryFilters", filters),
        PolicyRoute(MAX_PRODUCERS, "maxProducersPerTopic", "maxProducers", non_negative_int),
        PolicyRoute(MAX_CONSUMERS, "maxConsumersPerTopic", "maxConsumers", non_negative_int),
        PolicyRoute(MAX_CONSUMERS_PER_SUBSCRIPTION, "maxConsumersPerSubscription", "maxConsumersPerSubscription",
                    non_negative_int),
        PolicyRoute(MAX_UNACKED_PER_CONSUMER, "maxUnackedMessagesPerConsumer", "maxUnackedMessagesOnConsumer",
                    non_negative_int),
        PolicyRoute(MAX_MESSAGE_SIZE, None, "maxMessageSize", _message_size(service.config)),
        PolicyRoute(SUBSCRIPTION_EXPIRATION, "subscriptionExpirationTime", None, non_negative_number),
        PolicyRoute(DELAYED_DELIVERY, "delayedDelivery", "delayedDelivery", delayed_delivery_policies),
        PolicyRoute(SCHEMA_COMPATIBILITY, "schemaCompatibilityStrategy", "schemaCompatibilityStrategy",
                    schema_compatibility_strategy),
        PolicyRoute(SCHEMA_VALIDATION_ENFORCED, "schemaValidationEnforced", "schemaValidationEnforced", boolean),
        PolicyRoute(SCHEMA_AUTO_UPDATE, "isAllowAutoUpdateSchema", None, boolean),
        PolicyRoute(COMPACTION_THRESHOLD, "compactionThreshold", "compactionThreshold", non_negative_int),
        PolicyRoute(ENCRYPTION_REQUIRED, "encryptionRequired", None, boolean),
        PolicyRoute(PUBLISH_RATE, "publishRate", "publishRate", publish_rate),
        PolicyRoute(REPLICATOR_DISPATCH_RATE, "replicatorDispatchRate", "replicatorDispatchRate", dispatch_rate),
    ]


def _message_size(config: ServiceConfiguration) -> Validator:
    """Pulsar's rule: a topic's maxMessageSize is at most the broker's."""

    def valid(name: str, value: Any) -> int:
        size = non_negative_int(name, value)
        if size > config.maxMessageSize:
            raise fail(412, f"Invalid value for {name}: {size} is over the broker's maxMessageSize "
                            f"({config.maxMessageSize})")
        return size

    return valid
