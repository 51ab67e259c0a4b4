"""Retention policies (Pulsar's RetentionPolicies).

How much *consumed* data a topic keeps: `retentionTimeInMinutes` and `retentionSizeInMB`,
-1 for no limit, topic > namespace > broker (`defaultRetentionTimeInMinutes`,
`defaultRetentionSizeInMB`). Storage applies them when it trims (storage.ledger_trimmer);
this module resolves them and checks them as Pulsar's admin API does. A topic hands its
policy to its ledger when it loads and whenever monitors.retention runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.policies.topic_policies import Policy
from magnetar.storage.ledger_trimmer import RetentionPolicy

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.wire.topic_name import TopicName

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


def broker_default(config: ServiceConfiguration) -> Retention:
    return Retention(config.defaultRetentionTimeInMinutes, config.defaultRetentionSizeInMB)


def effective_retention(config: ServiceConfiguration, policies: TopicPolicies, topic: TopicName) -> Retention:
    """Topic, else namespace, else the broker's defaults."""
    value = policies.configured(topic, RETENTION)
    return broker_default(config) if value is None else Retention.from_json(value)


def check_against_backlog_quota(retention: Retention, size_limit_bytes: int, time_limit_seconds: int) -> None:
    """Pulsar refuses a retention that a backlog quota would already exceed: retained data
    counts toward nothing, but a quota at least as big as the retention makes no sense."""
    if retention.size_mb <= 0 or retention.time_minutes <= 0:
        return
    if size_limit_bytes >= retention.size_mb * MB or time_limit_seconds >= retention.time_minutes * 60:
        raise InvalidRetentionError("Retention Quota must exceed configured backlog quota for namespace.")
