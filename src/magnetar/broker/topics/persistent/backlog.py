"""What a backlog quota does to a persistent topic over it (Pulsar's BacklogQuotaManager).

The quotas and their policies are policies.backlog_quota's. Over one:

- `producer_request_hold`: producers are closed and refused on their return with
  ProducerBlockedQuotaExceededError (the official client keeps retrying and holds its
  pending sends);
- `producer_exception`: the same with ProducerBlockedQuotaExceededException (the client
  fails its pending sends);
- `consumer_backlog_eviction`: the slowest subscriptions lose their oldest messages until
  the topic is within the quota again.

Checked when a producer connects (check_producer_allowed) and by monitors.backlog_quota
(enforce).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.policies.backlog_quota import AGE, SIZE, BacklogQuota, effective_quotas
from magnetar.broker.topics.persistent.message_expiry import last_expired_position
from magnetar.storage.message_finder import entry_timestamp
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

log = logging.getLogger(__name__)
_ERRORS = {
    "producer_request_hold": pb.ProducerBlockedQuotaExceededError,
    "producer_exception": pb.ProducerBlockedQuotaExceededException,
}


def exceeded(topic: PersistentTopic) -> BacklogQuota | None:
    """The first quota the topic is over, if any."""
    quotas = effective_quotas(topic.context.config, topic.context.policies, topic.name)
    size, age = quotas[SIZE], quotas[AGE]
    if size.limit_size >= 0 and backlog_bytes(topic) > size.limit_size:
        return size
    if age.limit_time >= 0 and oldest_unacked_age_seconds(topic) > age.limit_time:
        return age
    return None


def subscription_backlog_bytes(subscription: PersistentSubscription) -> int:
    first = subscription.cursor.first_unacked_position()
    return 0 if first is None else subscription.topic.ledger.estimated_bytes_from(first)


def backlog_bytes(topic: PersistentTopic) -> int:
    """Pulsar's backlogSize: the estimated bytes of the slowest durable subscription."""
    return max((subscription_backlog_bytes(s) for s in topic.subscriptions.values() if s.durable), default=0)


def oldest_unacked_age_seconds(topic: PersistentTopic) -> float:
    oldest = None
    for subscription in topic.subscriptions.values():
        first = subscription.cursor.first_unacked_position() if subscription.durable else None
        if first is None:
            continue
        try:
            stamp = entry_timestamp(topic.ledger.read_entry(first))
        except WireError:
            continue
        oldest = stamp if oldest is None else min(oldest, stamp)
    return 0.0 if oldest is None else max(0.0, time.time() - oldest / 1000)


def check_producer_allowed(topic: PersistentTopic) -> None:
    """A producer arriving at a topic over a holding or failing quota is refused."""
    quota = exceeded(topic)
    if quota is not None and quota.policy in _ERRORS:
        raise BrokerServiceError(_ERRORS[quota.policy], f"Cannot create producer on topic with backlog quota "
                                 f"exceeded ({quota.policy})")


def enforce(topic: PersistentTopic) -> None:
    quota = exceeded(topic)
    if quota is None:
        return
    if quota.policy == "consumer_backlog_eviction":
        _evict(topic, quota)
    elif topic.producers:
        log.warning("[%s] backlog quota exceeded (%s): closing its producers", topic.name, quota.policy)
        for producer in list(topic.producers.values()):
            producer.cnx.tell_producer_closed(producer)


def _evict(topic: PersistentTopic, quota: BacklogQuota) -> None:
    """Drop the oldest messages of the slowest subscriptions until the quota holds."""
    if quota.limit_time >= 0:
        last = last_expired_position(topic, quota.limit_time)
        for subscription in topic.subscriptions.values():
            if subscription.durable and last > subscription.cursor.mark_delete_position:
                subscription.expire_up_to(last)
    if quota.limit_size >= 0:
        for subscription in topic.subscriptions.values():
            while subscription.durable and subscription_backlog_bytes(subscription) > quota.limit_size:
                if not subscription.skip(max(1, subscription.backlog() // 10)):
                    break
    log.warning("[%s] backlog quota exceeded: oldest messages of slow subscriptions evicted", topic.name)
