"""What a Kafka topic's configurations mean on magnetar: Pulsar's policies where Pulsar has
the concept, the stored value elsewhere; all of them where Pulsar keeps a topic's policies,
so `magnetar admin topics get-retention` and a Kafka client's DescribeConfigs agree.

- `retention.ms`, `retention.bytes`: the topic's retention policy (minutes, and megabytes
  rounded up: Pulsar counts whole ones). A topic a Kafka client creates keeps Kafka's
  default, 7 days and no size limit, unless its namespace has a retention policy: a Pulsar
  topic with none keeps nothing its subscriptions have consumed, and a Kafka consumer
  without a group has no subscription.
- `cleanup.policy`: `compact` turns the topic's compaction on: its compactionThreshold
  becomes its `segment.bytes` (Kafka compacts a segment once it is rolled), and Kafka
  consumers read the compacted view (see compacted); `delete` turns it off.
- `max.message.bytes`: the topic's maxMessageSize policy (at most the broker's).
- every other key: kept in the topic's `kafkaTopicConfigs` policy (KAFKA_CONFIGS, a dict by
  key) and reported back; a partition's `PartitionLog.policy(KAFKA_CONFIGS)` reads it
  cached, as ListOffsets by time reads `message.timestamp.type`.

Where DescribeConfigs says a value comes from: set on the topic, TOPIC_CONFIG; the
namespace's policy, DYNAMIC_DEFAULT_BROKER_CONFIG (a default for many topics, set at run
time); broker.conf, STATIC_BROKER_CONFIG; Kafka's own default, DEFAULT_CONFIG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from magnetar.broker.compaction import COMPACTION_THRESHOLD
from magnetar.broker.policies.retention import RETENTION, InvalidRetentionError, Retention, broker_default
from magnetar.broker.policies.topic_policies import BROKER, NAMESPACE, TOPIC, Policy
from magnetar.broker.topics.topic_limits import MAX_MESSAGE_SIZE
from magnetar.kafka.topic_configs import KEYS, InvalidConfig
from magnetar.kafka.topics import KafkaTopics

KAFKA_CONFIGS = Policy("kafkaTopicConfigs", "", "")
TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 3, 4, 5
_SOURCES = {TOPIC: TOPIC_CONFIG, NAMESPACE: DYNAMIC_DEFAULT_BROKER_CONFIG, BROKER: STATIC_BROKER_CONFIG}
_MB = 1024 * 1024
_RETENTION_KEYS = ("retention.ms", "retention.bytes")
#: Keys whose value is a Pulsar policy's, not stored with the others (cleanup.policy's list is, for its wording).
_POLICY_KEYS = frozenset({*_RETENTION_KEYS, "max.message.bytes"})


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    value: str
    source: int

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT_CONFIG


class TopicSettings:
    """The configurations of one Kafka topic, read from and written to the broker's policies."""

    def __init__(self, topics: KafkaTopics, topic: str) -> None:
        self._broker = topics.broker
        self._name = topics.pulsar_name(topic)

    def _policy(self, policy: Policy) -> tuple[Any, str]:
        return self._broker.policy(self._name, policy)

    def _stored(self) -> dict[str, str]:
        stored, level = self._policy(KAFKA_CONFIGS)
        return dict(stored) if stored and level == TOPIC else {}

    # -- reading
    def describe(self) -> list[Entry]:
        """Every key with its value in effect and where that comes from, in Kafka's order (by name)."""
        stored = self._stored()
        mapped = {**self._retention_entries(), "cleanup.policy": self._cleanup_entry(stored),
                  "max.message.bytes": self._size_entry()}
        return [mapped.get(name) or (Entry(name, stored[name], TOPIC_CONFIG) if name in stored
                                     else Entry(name, config.default, DEFAULT_CONFIG))
                for name, config in sorted(KEYS.items())]

    def _retention(self) -> tuple[Retention, str]:
        value, level = self._policy(RETENTION)
        return (broker_default(self._broker.config) if value is None else Retention.from_json(value)), level

    def _retention_entries(self) -> dict[str, Entry]:
        retention, level = self._retention()
        ms = -1 if retention.time_minutes < 0 else round(retention.time_minutes * 60_000)
        size = -1 if retention.size_mb < 0 else retention.size_mb * _MB
        return {"retention.ms": Entry("retention.ms", str(ms), _SOURCES[level]),
                "retention.bytes": Entry("retention.bytes", str(size), _SOURCES[level])}

    def _cleanup_entry(self, stored: dict[str, str]) -> Entry:
        threshold, level = self._policy(COMPACTION_THRESHOLD)
        if int(threshold or 0) > 0:
            words = stored.get("cleanup.policy", "")
            return Entry("cleanup.policy", words if "compact" in words.split(",") else "compact", _SOURCES[level])
        set_here = level == TOPIC or "cleanup.policy" in stored
        return Entry("cleanup.policy", "delete", TOPIC_CONFIG if set_here else DEFAULT_CONFIG)

    def _size_entry(self) -> Entry:
        size, level = self._policy(MAX_MESSAGE_SIZE)
        return Entry("max.message.bytes", str(size), _SOURCES[level])

    # -- writing
    def plan(self, changes: dict[str, str | None], *, replace: bool = False,
             kafka_retention: bool = False) -> dict[Policy, Any]:
        """The policy writes `changes` (normalized values; None: back to the default) make, each
        checked as the admin API checks it: InvalidConfig says what is refused. `replace`
        (AlterConfigs) puts every key not named back to its default; `kafka_retention` (a
        topic being created) gives it Kafka's retention unless its namespace has a policy."""
        stored = {} if replace else self._stored()
        for name, value in changes.items():
            if name in _POLICY_KEYS:
                continue
            if value is None:
                stored.pop(name, None)
            else:
                stored[name] = value
        writes: dict[Policy, Any] = {KAFKA_CONFIGS: stored or None}
        if replace or kafka_retention or any(name in changes for name in _RETENTION_KEYS):
            writes[RETENTION] = self._retention_write(changes, replace or kafka_retention)
        if replace or "max.message.bytes" in changes:
            writes[MAX_MESSAGE_SIZE] = self._size_write(changes.get("max.message.bytes"))
        compact = "compact" in stored.get("cleanup.policy", "").split(",")
        if replace or "cleanup.policy" in changes or (compact and "segment.bytes" in changes):
            writes[COMPACTION_THRESHOLD] = self._threshold_write(stored)
        return writes

    def apply(self, writes: dict[Policy, Any]) -> None:
        for policy, value in writes.items():
            self._broker.set_policy(self._name, policy, value)

    def _retention_write(self, changes: dict[str, str | None], replace: bool) -> dict[str, Any] | None:
        current = {entry.name: entry.value for entry in self._retention_entries().values()}
        ms, size = (changes.get(name, None if replace else current[name]) for name in _RETENTION_KEYS)
        if ms is None and size is None:
            _, level = self._broker.policy(self._name, RETENTION, below_topic=True)
            if level == NAMESPACE:  # the namespace decides for topics that set nothing
                return None
        millis = int(ms if ms is not None else KEYS["retention.ms"].default)
        size_bytes = int(size if size is not None else KEYS["retention.bytes"].default)
        retention = Retention(-1 if millis < 0 else millis / 60_000,
                              -1 if size_bytes < 0 else math.ceil(size_bytes / _MB))
        try:
            self._broker.check_retention(self._name, retention)
        except InvalidRetentionError as exc:
            raise InvalidConfig(f"retention.ms={millis}, retention.bytes={size_bytes}: {exc}") from None
        return retention.to_json()

    def _size_write(self, value: str | None) -> int | None:
        if value is None:
            return None
        limit = self._broker.config.maxMessageSize
        if int(value) > limit:
            raise InvalidConfig(f"max.message.bytes={value} is over the broker's maxMessageSize ({limit})")
        return int(value)

    def _threshold_write(self, stored: dict[str, str]) -> int | None:
        """compact: the segment size; delete: none, or 0 over a namespace or broker threshold."""
        if "compact" in stored.get("cleanup.policy", "").split(","):
            return int(stored.get("segment.bytes", KEYS["segment.bytes"].default))
        below, _ = self._broker.policy(self._name, COMPACTION_THRESHOLD, below_topic=True)
        return 0 if int(below or 0) > 0 else None
