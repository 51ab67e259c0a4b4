"""Limits and settings that namespaces and topics may override: how many producers and
consumers a topic takes, how many messages a consumer may hold unacknowledged, delayed
delivery on or off, how big a message may be, whether messages must come encrypted.

Each is a `Policy` of broker.policies, under Pulsar's three names (topic admin path,
namespace `Policies` field, broker.conf key). A limit of 0 means none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.policies.topic_policies import Policy
from magnetar.broker.topics.publish_rate import PublishRateLimiter, publish_limiter
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_subscription import AbstractSubscription
    from magnetar.broker.topics.abstract_topic import AbstractTopic

MAX_PRODUCERS = Policy("maxProducers", "max_producers_per_topic", "maxProducersPerTopic")
MAX_CONSUMERS = Policy("maxConsumers", "max_consumers_per_topic", "maxConsumersPerTopic")
MAX_CONSUMERS_PER_SUBSCRIPTION = Policy(
    "maxConsumersPerSubscription", "max_consumers_per_subscription", "maxConsumersPerSubscription")
MAX_UNACKED_PER_CONSUMER = Policy(
    "maxUnackedMessagesOnConsumer", "max_unacked_messages_per_consumer", "maxUnackedMessagesPerConsumer")
SUBSCRIPTION_EXPIRATION = Policy(
    "subscriptionExpirationTime", "subscription_expiration_time_minutes", "subscriptionExpirationTimeMinutes")
DELAYED_DELIVERY = Policy("delayedDelivery", "delayed_delivery_policies", "delayedDeliveryEnabled")
#: Pulsar sets it on topics only (no namespace field); at most the broker's maxMessageSize.
MAX_MESSAGE_SIZE = Policy("maxMessageSize", "", "maxMessageSize")
ENCRYPTION_REQUIRED = Policy("encryptionRequired", "encryption_required", "encryptionRequireOnProducer")
"""A namespace policy in Pulsar (no topic-level path). Its broker key only gates producers."""


def _limit(topic: AbstractTopic, policy: Policy) -> int:
    return int(topic.context.policies.effective(topic.name, policy) or 0)


def check_new_producer(topic: AbstractTopic) -> None:
    limit = _limit(topic, MAX_PRODUCERS)
    if limit and len(topic.producers) >= limit:
        raise BrokerServiceError(pb.ProducerBusy, f"Topic '{topic.name}' reached max producers limit ({limit})")


def encryption_required(topic: AbstractTopic) -> bool:
    """The namespace's `encryption_required`: every SEND must carry `encryption_keys`."""
    return bool(topic.context.policies.configured(topic.name, ENCRYPTION_REQUIRED))


def check_producer_encryption(topic: AbstractTopic, encrypted: bool) -> None:
    """A producer that does not say it encrypts (CommandProducer.encrypted) is refused where
    encryption is required, or everywhere with `encryptionRequireOnProducer`, as in Pulsar."""
    if not encrypted and (topic.context.config.encryptionRequireOnProducer or encryption_required(topic)):
        raise BrokerServiceError(pb.MetadataError, f"Encryption is required in {topic.name}")


def check_new_consumer(topic: AbstractTopic, subscription: AbstractSubscription | None) -> None:
    per_topic = _limit(topic, MAX_CONSUMERS)
    if per_topic and sum(len(s.consumers) for s in topic.subscriptions.values()) >= per_topic:
        raise BrokerServiceError(pb.ConsumerBusy, f"Topic '{topic.name}' reached max consumers limit ({per_topic})")
    per_subscription = _limit(topic, MAX_CONSUMERS_PER_SUBSCRIPTION)
    if per_subscription and subscription is not None and len(subscription.consumers) >= per_subscription:
        raise BrokerServiceError(
            pb.ConsumerBusy, f"Subscription '{subscription.name}' reached max consumers limit ({per_subscription})")


def max_unacked_per_consumer(topic: AbstractTopic, sub_type: int) -> int:
    """Only Shared and Key_Shared consumers are held to it, as in Pulsar: the others
    acknowledge cumulatively and cannot leave holes for a limit to count."""
    if sub_type not in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared):
        return 0
    return _limit(topic, MAX_UNACKED_PER_CONSUMER)


def topic_max_message_size(topic: AbstractTopic) -> int | None:
    """The topic's own maxMessageSize policy, None when it has none (the broker's applies)."""
    value = topic.context.policies.configured(topic.name, MAX_MESSAGE_SIZE)
    return int(value) if value else None


@dataclass(frozen=True, slots=True)
class SendLimits:
    """The policies every SEND is checked against, read once per change of any policy
    rather than twice per SEND (two look-ups cost about 2 µs of the unbatched hot path)."""

    max_message_size: int | None
    encryption_required: bool
    publish_limiter: PublishRateLimiter | None


def send_limits(topic: AbstractTopic) -> SendLimits:
    version = topic.context.policies.version
    cached = topic.send_limits
    if cached is None or cached[0] != version:
        cached = topic.send_limits = (version, SendLimits(topic_max_message_size(topic), encryption_required(topic),
                                                          publish_limiter(topic)))
    return cached[1]


@dataclass(frozen=True, slots=True)
class DelayedDeliverySettings:
    active: bool
    tick_time_ms: int
    max_delay_ms: int


def delayed_delivery(topic: AbstractTopic) -> DelayedDeliverySettings:
    """The namespace or topic `delayedDelivery` policy, else the broker's three keys."""
    config = topic.context.config
    value: Any = topic.context.policies.configured(topic.name, DELAYED_DELIVERY)
    if value is None:
        return DelayedDeliverySettings(config.delayedDeliveryEnabled, config.delayedDeliveryTickTimeMillis,
                                       config.delayedDeliveryMaxDelayInMillis)
    return DelayedDeliverySettings(bool(value.get("active", config.delayedDeliveryEnabled)),
                                   int(value.get("tickTime", config.delayedDeliveryTickTimeMillis)),
                                   int(value.get("maxDeliveryDelayInMillis", config.delayedDeliveryMaxDelayInMillis)))
