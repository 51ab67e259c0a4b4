"""The message TTL's timer: every messageExpiryCheckIntervalInMinutes, each loaded topic
with a TTL (topic > namespace > ttlDurationDefaultInSeconds) has what is older than it
acknowledged on every subscription (the rule: topics.persistent.message_expiry)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.monitors.periodic import PeriodicTask, each_topic
from magnetar.broker.topics.persistent.message_expiry import expire_messages

if TYPE_CHECKING:
    from magnetar.broker.monitors.registry import TopicRegistry
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic


class MessageExpiryMonitor:
    def __init__(self, registry: TopicRegistry) -> None:
        self._task = PeriodicTask("message expiry", registry.config.messageExpiryCheckIntervalInMinutes * 60,
                                  each_topic(registry, _expire, "message expiry"))

    def start(self) -> None:
        self._task.start()

    def stop(self) -> None:
        self._task.stop()


def _expire(topic: PersistentTopic) -> None:
    ttl = topic.message_ttl_seconds()
    if ttl > 0:
        expire_messages(topic, ttl)
