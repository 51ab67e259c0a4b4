"""The compaction monitor: every `brokerServiceCompactionMonitorIntervalInSeconds`, a loaded
topic whose bytes beyond the compaction horizon exceed its `compactionThreshold` (topic >
namespace > `brokerServiceCompactionThresholdInBytes`; 0 = never) is compacted, unless a
run is under way. The runs themselves are compaction.CompactionManager's."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.compaction import COMPACTION_THRESHOLD
from magnetar.broker.monitors.periodic import PeriodicTask

if TYPE_CHECKING:
    from magnetar.broker.compaction import CompactionManager
    from magnetar.broker.monitors.registry import TopicRegistry
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

log = logging.getLogger(__name__)


class CompactionMonitor(PeriodicTask):
    def __init__(self, registry: TopicRegistry, runs: CompactionManager) -> None:
        super().__init__("compaction threshold check", registry.config.brokerServiceCompactionMonitorIntervalInSeconds,
                         self._check_thresholds)
        self._registry = registry
        self._runs = runs

    def _check_thresholds(self) -> None:
        for topic in list(self._registry.topics.values()):
            if self._over_threshold(topic):
                log.info("[%s] backlog beyond the compaction horizon exceeds its threshold: compacting", topic.name)
                self._runs.trigger(topic)

    def _over_threshold(self, topic: PersistentTopic) -> bool:
        if self._runs.running(str(topic.name)):
            return False
        threshold = int(self._registry.policies.effective(topic.name, COMPACTION_THRESHOLD) or 0)
        if threshold <= 0:
            return False
        ledger = topic.ledger
        horizon = topic.compaction_service.last_compacted_position()
        if horizon is None:
            pending = ledger.total_size_bytes()
        else:
            last = ledger.last_confirmed_position
            beyond = last is not None and last > horizon
            pending = ledger.estimated_bytes_from(ledger.next_position(horizon)) if beyond else 0
        return pending > threshold
