"""Retention's timer: every `retentionCheckIntervalInSeconds`, each loaded topic takes its
current retention policy (policies.retention) and is trimmed on the storage's trimmer
thread, never on the event loop."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.monitors.periodic import PeriodicTask, each_topic

if TYPE_CHECKING:
    from magnetar.broker.monitors.registry import TopicRegistry
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

log = logging.getLogger(__name__)


class RetentionMonitor(PeriodicTask):
    def __init__(self, registry: TopicRegistry) -> None:
        super().__init__("retention check", registry.config.retentionCheckIntervalInSeconds,
                         each_topic(registry, self.trim, "retention check"))
        self._registry = registry

    def refresh(self) -> None:
        """A policy changed: every loaded topic takes its new value now."""
        for topic in list(self._registry.topics.values()):
            try:
                topic.apply_retention()
            except Exception:
                log.exception("retention policy of %s unreadable; keeping the previous one", topic)

    def trim(self, topic: PersistentTopic) -> None:
        topic.apply_retention()
        self._registry.factory.trim_in_background(topic.ledger)
