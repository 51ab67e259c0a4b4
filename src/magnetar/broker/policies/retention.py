"""Retention policies (Pulsar's RetentionPolicies) and the periodic retention check.

How much *consumed* data a topic keeps: `retentionTimeInMinutes` and `retentionSizeInMB`,
-1 for no limit, topic > namespace > broker (`defaultRetentionTimeInMinutes`,
`defaultRetentionSizeInMB`). Storage applies them when it trims (storage.ledger_trimmer);
this module resolves them, checks them as Pulsar's admin API does, and runs the check
every `retentionCheckIntervalInSeconds`: each loaded topic gets its current policy and a
trim on the storage's trimmer thread, never on the event loop.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.monitors.periodic import PeriodicTask, each_topic
from magnetar.broker.policies.topic_policies import Policy
from magnetar.storage.ledger_trimmer import RetentionPolicy

if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

log = logging.getLogger(__name__)
RETENTION = Policy("retention", "retention_policies", "")
MB = 1024 * 1024


class InvalidRetentionError(ValueError):
    """A retention policy Pulsar's admin API refuses (412, with this message as the reason)."""


@dataclass(frozen=True, slots=True)
class Retention:
    """Pulsar's RetentionPolicies JSON; minutes may be fractional here (Pulsar: whole)."""

    time_minutes: float
    size_mb: int

    @classmethod
    def from_json(cls, value: Any) -> Retention:
        if not isinstance(value, dict):
            raise InvalidRetentionError("a retention policy is a JSON object "
                                        '{"retentionTimeInMinutes": ..., "retentionSizeInMB": ...}')
        minutes, size = value.get("retentionTimeInMinutes", 0), value.get("retentionSizeInMB", 0)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (minutes, size)):
            raise InvalidRetentionError("retentionTimeInMinutes and retentionSizeInMB must be numbers")
        if not isinstance(size, int) and not float(size).is_integer():
            raise InvalidRetentionError("retentionSizeInMB must be a whole number of megabytes")
        retention = cls(minutes, int(size))
        retention.validate()
        return retention

    def validate(self) -> None:
        """Pulsar's checks: each limit is -1 (none), 0 or positive, and a single 0 beside a
        non-zero limit is refused (it would make the other limit meaningless; -1 says "none")."""
        if self.size_mb < -1:
            raise InvalidRetentionError("Invalid retention policy: size limit must be >= -1")
        if self.time_minutes < -1:
            raise InvalidRetentionError("Invalid retention policy: time limit must be >= -1")
        if (self.time_minutes == 0) != (self.size_mb == 0):
            raise InvalidRetentionError(
                "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the "
                "limits has a non-zero value. Use the value of -1 instead of 0 to ignore a specific limit.")

    def to_json(self) -> dict[str, Any]:
        minutes = int(self.time_minutes) if float(self.time_minutes).is_integer() else self.time_minutes
        return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": self.size_mb}

    def to_storage(self) -> RetentionPolicy:
        seconds = -1 if self.time_minutes < 0 else self.time_minutes * 60
        return RetentionPolicy(seconds, -1 if self.size_mb < 0 else self.size_mb * MB)


def broker_default(service: BrokerService) -> Retention:
    return Retention(service.config.defaultRetentionTimeInMinutes, service.config.defaultRetentionSizeInMB)


def effective_retention(service: BrokerService, topic: PersistentTopic) -> Retention:
    """Topic, else namespace, else the broker's defaults."""
    value = service.policies.configured(topic.name, RETENTION)
    return broker_default(service) if value is None else Retention.from_json(value)


def check_against_backlog_quota(retention: Retention, size_limit_bytes: int, time_limit_seconds: int) -> None:
    """Pulsar refuses a retention that a backlog quota would already exceed: retained data
    counts toward nothing, but a quota at least as big as the retention makes no sense."""
    if retention.size_mb <= 0 or retention.time_minutes <= 0:
        return
    if size_limit_bytes >= retention.size_mb * MB or time_limit_seconds >= retention.time_minutes * 60:
        raise InvalidRetentionError("Retention Quota must exceed configured backlog quota for namespace.")


def apply(service: BrokerService, topic: PersistentTopic) -> None:
    """Hand the topic's current policy to its managed ledger (read by every trim)."""
    topic.ledger.retention = effective_retention(service, topic).to_storage()


class RetentionMonitor:
    """Every retentionCheckIntervalInSeconds: refresh each loaded topic's policy, trim it."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._task = PeriodicTask("retention check", service.config.retentionCheckIntervalInSeconds,
                                  each_topic(service, self.trim, "retention check"))

    def start(self) -> None:
        self._task.start()

    def stop(self) -> None:
        self._task.stop()

    def refresh(self) -> None:
        """A policy changed: every loaded topic takes its new value now."""
        for topic in list(self.service.topics.values()):
            try:
                apply(self.service, topic)
            except Exception:
                log.exception("retention policy of %s unreadable; keeping the previous one", topic)

    def trim(self, topic: PersistentTopic) -> None:
        apply(self.service, topic)
        self.service.factory.trim_in_background(topic.ledger)
