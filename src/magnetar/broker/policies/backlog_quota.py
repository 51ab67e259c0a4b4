"""Backlog quotas (Pulsar's BacklogQuota): how far readers may fall behind, and what
happens then.

Two quotas, as in Pulsar: `destination_storage` bounds the bytes of the largest
subscription backlog, `message_age` the age of the oldest unacknowledged message, each
with its policy (`producer_request_hold`, `producer_exception`,
`consumer_backlog_eviction`), from the topic, else the namespace, else the broker's
`backlogQuotaDefault*` keys. What a policy does to a topic over its quota is
topics.persistent.backlog's; when it is checked, monitors.backlog_quota's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.policies.topic_policies import Policy

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.wire.topic_name import TopicName

BACKLOG_QUOTA = Policy("backlogQuotaMap", "backlog_quota_map", "")
SIZE, AGE = "destination_storage", "message_age"
POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """Pulsar's BacklogQuota JSON: limitSize in bytes, limitTime in seconds, -1 = none."""

    limit_size: int = -1
    limit_time: int = -1
    policy: str = "producer_request_hold"

    @classmethod
    def from_json(cls, value: Any) -> BacklogQuota:
        if not isinstance(value, dict):
            raise ValueError("a backlog quota is a JSON object")
        policy = value.get("policy", "producer_request_hold")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
        size, seconds = value.get("limitSize", -1), value.get("limitTime", -1)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (size, seconds)):
            raise ValueError("limitSize and limitTime must be integers")
        return cls(size, seconds, policy)

    def to_json(self) -> dict[str, Any]:
        return {"limitSize": self.limit_size, "limitTime": self.limit_time, "policy": self.policy}


def effective_quotas(
    config: ServiceConfiguration, policies: TopicPolicies, topic: TopicName,
) -> dict[str, BacklogQuota]:
    """Each quota type from the topic, else the namespace, else the broker defaults (the
    policies cached: a Kafka produce asks on every request)."""
    on_topic, on_namespace = policies.layers(topic, BACKLOG_QUOTA)
    topic_map, namespace_map = on_topic or {}, on_namespace or {}
    defaults = {
        SIZE: BacklogQuota(config.backlogQuotaDefaultLimitBytes, -1, config.backlogQuotaDefaultRetentionPolicy),
        AGE: BacklogQuota(-1, config.backlogQuotaDefaultLimitSecond, config.backlogQuotaDefaultRetentionPolicy),
    }
    return {kind: BacklogQuota.from_json(topic_map[kind]) if kind in topic_map
            else BacklogQuota.from_json(namespace_map[kind]) if kind in namespace_map else default
            for kind, default in defaults.items()}
