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


class MessageExpiryMonitor(PeriodicTask):
    def __init__(self, registry: TopicRegistry) -> None:
        super().__init__("message expiry", registry.config.messageExpiryCheckIntervalInMinutes * 60,
                         each_topic(registry, _expire, "message expiry"))


def _expire(topic: PersistentTopic) -> None:
    ttl = topic.message_ttl_seconds()
    if ttl > 0:
        expire_messages(topic, ttl)
