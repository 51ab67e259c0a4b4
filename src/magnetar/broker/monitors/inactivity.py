"""What nobody uses goes away: inactive topics and expired subscriptions, under Pulsar's keys.

- `brokerDeleteInactiveTopicsEnabled`: a topic with no producer and no consumer for
  `brokerDeleteInactiveTopicsMaxInactiveDurationSeconds` is deleted, checked every
  `brokerDeleteInactiveTopicsFrequencySeconds`; with `delete_when_no_subscriptions` only if
  it has no subscription, with `delete_when_subscriptions_caught_up` only if every
  subscription has read everything. Off by default here (Pulsar's default is on): a
  standalone on a laptop or at the edge should not delete data written before anyone
  subscribed.
- `subscriptionExpirationTimeMinutes` (0 = never, Pulsar's default): a durable
  subscription without a consumer for that long is deleted, checked every
  `subscriptionExpiryCheckIntervalInMinutes`.

Idleness is counted from the moment it is first seen, so a restart starts it afresh.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from magnetar.broker.monitors.periodic import PeriodicTask
from magnetar.broker.topics.topic_limits import SUBSCRIPTION_EXPIRATION

if TYPE_CHECKING:
    from magnetar.broker.monitors.registry import TopicRegistry
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

log = logging.getLogger(__name__)
MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")


class InactivityMonitor:
    def __init__(self, registry: TopicRegistry) -> None:
        self._registry = registry
        self._idle_topics: dict[str, float] = {}
        self._idle_subscriptions: dict[tuple[str, str], float] = {}
        config = registry.config
        self._topics_task = PeriodicTask("inactive topic check", config.brokerDeleteInactiveTopicsFrequencySeconds,
                                         self.delete_inactive_topics)
        self._subscriptions_task = PeriodicTask("subscription expiry check",
                                                config.subscriptionExpiryCheckIntervalInMinutes * 60,
                                                self.expire_subscriptions)

    def start(self) -> None:
        if self._registry.config.brokerDeleteInactiveTopicsEnabled:
            self._topics_task.start()
        # Always: a namespace or topic may set subscriptionExpirationTime when the broker does not.
        self._subscriptions_task.start()

    def stop(self) -> None:
        self._topics_task.stop()
        self._subscriptions_task.stop()

    # -- topics
    def delete_inactive_topics(self) -> None:
        config = self._registry.config
        now = time.monotonic()
        for key, topic in list(self._registry.topics.items()):
            if _in_use(topic):
                self._idle_topics.pop(key, None)
                continue
            since = self._idle_topics.setdefault(key, now)
            if now - since >= config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds and self._deletable(topic):
                log.info("[%s] deleting: inactive for %.0f s (%s)", key, now - since,
                         config.brokerDeleteInactiveTopicsMode)
                self._idle_topics.pop(key, None)
                self._registry.delete_topic(topic.name)

    def _deletable(self, topic: PersistentTopic) -> bool:
        if any(replicator.backlog() for replicator in topic.replicators.values()):
            return False  # what a remote cluster has not received yet stays, as Pulsar keeps it
        if self._registry.config.brokerDeleteInactiveTopicsMode == "delete_when_no_subscriptions":
            return not topic.subscriptions
        return all(subscription.backlog() == 0 for subscription in topic.subscriptions.values())

    # -- subscriptions
    def expire_subscriptions(self) -> None:
        now = time.monotonic()
        for key, topic in list(self._registry.topics.items()):
            limit = float(self._registry.policies.effective(topic.name, SUBSCRIPTION_EXPIRATION) or 0) * 60
            if limit <= 0:
                continue
            for name, subscription in list(topic.subscriptions.items()):
                idle_key = (key, name)
                if subscription.consumers or not subscription.durable:
                    self._idle_subscriptions.pop(idle_key, None)
                    continue
                since = self._idle_subscriptions.setdefault(idle_key, now)
                if now - since >= limit:
                    log.info("[%s][%s] deleting: no consumer for %.0f s (subscriptionExpirationTime)",
                             key, name, now - since)
                    self._idle_subscriptions.pop(idle_key, None)
                    topic.delete_subscription(name)


def _in_use(topic: PersistentTopic) -> bool:
    return bool(topic.producers) or any(subscription.consumers for subscription in topic.subscriptions.values())
