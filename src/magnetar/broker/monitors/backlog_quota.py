"""The backlog quotas' timer: every `backlogQuotaCheckIntervalInSeconds` (when
`backlogQuotaCheckEnabled`), each loaded topic over a quota has its policy enforced (the
rule: topics.persistent.backlog). Producers arriving are checked by the topic itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.monitors.periodic import PeriodicTask, each_topic
from magnetar.broker.topics.persistent.backlog import enforce

if TYPE_CHECKING:
    from magnetar.broker.monitors.registry import TopicRegistry


class BacklogQuotaChecker(PeriodicTask):
    def __init__(self, registry: TopicRegistry) -> None:
        super().__init__("backlog quota check", registry.config.backlogQuotaCheckIntervalInSeconds,
                         each_topic(registry, enforce, "backlog quota check"))
        self._enabled = registry.config.backlogQuotaCheckEnabled

    def start(self) -> None:
        if self._enabled:
            super().start()
