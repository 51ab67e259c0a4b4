"""The policies in effect for a topic: topic > namespace > broker default, in one place.

Each policy has three names, as in Pulsar: the topic-level one of the admin path
(`.../{topic}/messageTTL`), the field of the namespace's `Policies` JSON
(`message_ttl_in_seconds`), and the broker.conf key of its default
(`ttlDurationDefaultInSeconds`). A partition takes its partitioned topic's policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.policies.watchers import Watchers
from magnetar.wire.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.resources import NamespaceResources
    from magnetar.storage import MetadataStore

_TOPIC_POLICIES = "/admin/policies/"
_CACHE_LIMIT = 100_000
"""Entries `effective` keeps before starting over: one per topic and policy, whatever names come."""


@dataclass(frozen=True, slots=True)
class Policy:
    topic_key: str
    namespace_field: str
    broker_default: str


MESSAGE_TTL = Policy("messageTTL", "message_ttl_in_seconds", "ttlDurationDefaultInSeconds")
#: The clusters a topic is replicated to: the topic's list, else its namespace's (no broker default:
#: unset is the local cluster alone).
REPLICATION_CLUSTERS = Policy("replicationClusters", "replication_clusters", "")
#: Where a policy's value in effect comes from (`TopicPolicies.resolved`).
TOPIC, NAMESPACE, BROKER = "topic", "namespace", "broker"


class TopicPolicies:
    def __init__(self, store: MetadataStore, namespaces: NamespaceResources, config: ServiceConfiguration) -> None:
        self._store = store
        self._namespaces = namespaces
        self._config = config
        self._changes = 0
        self._cache: dict[tuple[TopicName, Policy], tuple[Any | None, Any | None]] = {}
        self._cache_version = 0
        self._watchers: Watchers[TopicName] = Watchers()

    def watch(self, watcher: Callable[[TopicName], None]) -> None:
        """Call `watcher(topic)` after a topic's own policies change (namespaces': see
        NamespaceResources.watch)."""
        self._watchers.add(watcher)

    def _topic_changed(self, topic: TopicName) -> None:
        self._changes += 1
        self._watchers.notify(topic)

    @property
    def version(self) -> int:
        """Moves on every change of a topic's or a namespace's policies: what `effective`
        and the topics' own caches of derived state are keyed by."""
        return self._changes + self._namespaces.version

    def topic_value(self, topic: TopicName, policy: Policy) -> Any | None:
        """The value set on the topic (or on its partitioned topic), None if none is."""
        for owner in (topic, topic.partitioned_topic_name):
            raw = self._store.get(self._key(owner, policy))
            if raw is not None:
                return json.loads(raw)
        return None

    def set_topic_value(self, topic: TopicName, policy: Policy, value: Any | None) -> None:
        key = self._key(topic, policy)
        if value is None:
            self._store.delete(key)
        else:
            self._store.put(key, json.dumps(value).encode())
        self._topic_changed(topic)

    def topic_values(self, policy: Policy) -> list[Any]:
        """Every value of `policy` set on a topic (what a start-up asks: does any topic set one?)."""
        suffix = f"/{policy.topic_key}"
        return [json.loads(raw) for key in self._store.list(_TOPIC_POLICIES)
                if key.endswith(suffix) and (raw := self._store.get(key)) is not None]

    def set_namespace_value(self, namespace: str, policy: Policy, value: Any | None) -> None:
        self._namespaces.set_policy(namespace, policy.namespace_field, value)

    def delete_topic(self, topic: TopicName) -> None:
        """Forget every policy set on a deleted topic."""
        self._topic_changed(topic)
        self._store.delete_prefix(f"{_TOPIC_POLICIES}{topic.storage_name}/")

    def namespace_value(self, namespace: str, policy: Policy) -> Any | None:
        return self._namespaces.policies(namespace).get(policy.namespace_field)

    def existing_namespace_value(self, namespace: str, policy: Policy) -> Any | None:
        """The namespace's value; None also when the namespace does not exist."""
        return self.namespace_value(namespace, policy) if self._namespaces.namespace_exists(namespace) else None

    def configured(self, topic: TopicName, policy: Policy) -> Any | None:
        """The topic's value, else its namespace's, None when neither sets one; cached until
        a policy changes, so the publish path (a delayed message's maximum delay) and
        per-topic checks read it without touching the metadata store. The value is shared:
        callers do not modify it."""
        on_topic, on_namespace = self.layers(topic, policy)
        return on_namespace if on_topic is None else on_topic

    def layers(self, topic: TopicName, policy: Policy) -> tuple[Any | None, Any | None]:
        """(the topic's value, its namespace's), cached as `configured` is: for a policy whose
        parts resolve one by one (a backlog quota of each type)."""
        version = self.version
        if version != self._cache_version or len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
            self._cache_version = version
        key = (topic, policy)
        if key not in self._cache:
            self._cache[key] = (self.topic_value(topic, policy),
                                self.existing_namespace_value(topic.namespace_name, policy))
        return self._cache[key]

    def resolved(self, topic: TopicName, policy: Policy, *, below_topic: bool = False) -> tuple[Any, str]:
        """The value in effect and where it is set (TOPIC, NAMESPACE, or BROKER: the value of
        the policy's broker.conf key, None for a policy without one), read afresh: for
        reports that name the source, as Kafka's DescribeConfigs does. `below_topic`: what
        would be in effect without the topic's own value."""
        value = None if below_topic else self.topic_value(topic, policy)
        if value is not None:
            return value, TOPIC
        value = self.existing_namespace_value(topic.namespace_name, policy)
        if value is not None:
            return value, NAMESPACE
        return (getattr(self._config, policy.broker_default) if policy.broker_default else None), BROKER

    def effective(self, topic: TopicName, policy: Policy) -> Any:
        """`configured`, else the broker default of the policy's broker.conf key."""
        value = self.configured(topic, policy)
        return getattr(self._config, policy.broker_default) if value is None else value

    @staticmethod
    def _key(topic: TopicName, policy: Policy) -> str:
        return f"{_TOPIC_POLICIES}{topic.storage_name}/{policy.topic_key}"
