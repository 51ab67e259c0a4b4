"""Where dispatch meets entry filters: each entry is judged for the consumer it would go to.

REJECT acknowledges the entry for the subscription (the backlog shrinks, and a restart
does not bring it back); RESCHEDULE leaves it unacknowledged for the dispatcher to try
again after `dispatcherFilterRescheduledMessageDelay`, without counting a redelivery;
ACCEPT lets it go. The subscription's FilterCounters (topics.stats) count each verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from magnetar.broker.entry_filters import FilterContext, FilterEntry, FilterResult

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer, DispatchEntry
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription


def filter_context(subscription: PersistentSubscription, consumer: Consumer | None,
                   properties: Mapping[str, str] | None = None) -> FilterContext:
    return FilterContext(
        topic=str(subscription.topic.name),
        subscription=subscription.name,
        subscription_properties=subscription.properties if properties is None else properties,
        consumer=consumer.name if consumer is not None else None,
        consumer_metadata=consumer.metadata if consumer is not None else {},
    )


def judge(subscription: PersistentSubscription, consumer: Consumer, entry: DispatchEntry) -> FilterResult:
    """The topic's filters' verdict on `entry` for `consumer`; a rejected entry is acknowledged."""
    chain = subscription.topic.entry_filters
    if chain is None or entry.metadata is None:
        return FilterResult.ACCEPT
    result = chain.judge(FilterEntry(entry.position, entry.metadata, entry.data),
                         subscription.filter_context_for(consumer))
    counters = subscription.filter_counters
    counters.processed += entry.num_messages
    if result is FilterResult.ACCEPT:
        counters.accepted += entry.num_messages
    elif result is FilterResult.REJECT:
        counters.rejected += entry.num_messages
        subscription.acknowledge_filtered(entry.position)
    else:
        counters.rescheduled += entry.num_messages
    return result
