"""The broker's schema registry service (Pulsar's SchemaRegistryService as topics use it):
registration of producers' and consumers' schemas under the topic's policies, lookups for
GET_SCHEMA, and forgetting a deleted topic's schema.

The policies, each resolved topic > namespace > broker default:
- `schemaCompatibilityStrategy` (namespace field `schema_compatibility_strategy`; UNDEFINED
  means not set; an old namespace's `schema_auto_update_compatibility_strategy` is honoured
  when no strategy is set; broker default FULL);
- `isAllowAutoUpdateSchema` (namespace field `is_allow_auto_update_schema`, broker key
  `isAllowAutoUpdateSchemaEnabled`): may a new schema be added at all;
- `schemaValidationEnforced` (`schema_validation_enforced`, broker key
  `isSchemaValidationEnforced`): may a producer without a schema use a topic that has one.

Every refusal reaches the client as IncompatibleSchema (18), as in Pulsar.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.policies.topic_policies import Policy
from magnetar.schemas import (
    CompatibilityStrategy,
    InvalidSchemaError,
    SchemaData,
    SchemaError,
    SchemaNotFoundError,
    SchemaRegistry,
    SchemaType,
    SchemaVersion,
    schema_id,
    version_bytes,
    version_from_bytes,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.storage import MetadataStore
    from magnetar.wire.topic_name import TopicName

SCHEMA_COMPATIBILITY = Policy(
    "schemaCompatibilityStrategy", "schema_compatibility_strategy", "schemaCompatibilityStrategy")
SCHEMA_AUTO_UPDATE = Policy("isAllowAutoUpdateSchema", "is_allow_auto_update_schema", "isAllowAutoUpdateSchemaEnabled")
SCHEMA_VALIDATION_ENFORCED = Policy(
    "schemaValidationEnforced", "schema_validation_enforced", "isSchemaValidationEnforced")
SCHEMA_STRATEGIES = tuple(strategy.value for strategy in CompatibilityStrategy)
"""Pulsar's SchemaCompatibilityStrategy names, as policies take them."""
_LEGACY_AUTO_UPDATE = Policy("schemaAutoUpdateCompatibilityStrategy", "schema_auto_update_compatibility_strategy",
                            "schemaCompatibilityStrategy")
"""What namespaces set before `schema_compatibility_strategy` existed (Backward, Full, ...)."""
_UNSET = (None, CompatibilityStrategy.UNDEFINED.value)


class SchemaRegistryService:
    def __init__(self, store: MetadataStore, policies: TopicPolicies, config: ServiceConfiguration) -> None:
        self.registry = SchemaRegistry(store)
        self._policies = policies
        self._config = config

    # -- policies
    def strategy(self, topic: TopicName) -> CompatibilityStrategy:
        """The topic's strategy, else its namespace's, else the broker's (UNDEFINED = unset)."""
        namespace = topic.namespace_name
        value = self._policies.topic_value(topic, SCHEMA_COMPATIBILITY)
        if value in _UNSET:
            value = self._policies.existing_namespace_value(namespace, SCHEMA_COMPATIBILITY)
        if value in _UNSET:
            legacy = self._policies.existing_namespace_value(namespace, _LEGACY_AUTO_UPDATE)
            if legacy is not None:
                return CompatibilityStrategy.from_auto_update(legacy)
            value = self._config.schemaCompatibilityStrategy
        strategy = CompatibilityStrategy.parse(value)
        return CompatibilityStrategy.FULL if strategy == CompatibilityStrategy.UNDEFINED else strategy

    def allow_auto_update(self, topic: TopicName) -> bool:
        return bool(self._policies.effective(topic, SCHEMA_AUTO_UPDATE))

    def validation_enforced(self, topic: TopicName) -> bool:
        return bool(self._policies.effective(topic, SCHEMA_VALIDATION_ENFORCED))

    # -- registration
    def add_schema(self, topic: TopicName, schema: SchemaData | None) -> bytes:
        """A producer's schema (Pulsar's tryAddSchema): its version, registered if new and
        allowed; without one, empty, unless the topic has a schema and enforces it."""
        sid = schema_id(topic)
        if schema is None:
            if self.registry.has_schema(sid) and self.validation_enforced(topic):  # the cached check first
                raise _incompatible("Producers cannot connect or send message without a schema to topics with a "
                                    "schema if SchemaValidationEnforced is enabled")
            return b""
        try:
            version = self.registry.put_if_absent(sid, schema, self.strategy(topic),
                                                  allow_auto_update=self.allow_auto_update(topic))
        except SchemaError as exc:
            raise _incompatible(str(exc)) from None
        return version_bytes(version)

    def add_schema_if_idle_or_check(self, topic: TopicName, schema: SchemaData | None, *, idle: bool) -> None:
        """A consumer's schema: registered when the topic is idle and has none (no producers,
        no consumers, nothing stored), else it must read what the topic holds."""
        if schema is None or schema.type == SchemaType.AUTO_CONSUME:
            return
        sid = schema_id(topic)
        if idle and not self.registry.has_schema(sid):
            self.add_schema(topic, schema)
            return
        try:
            self.registry.check_consumer(sid, schema, self.strategy(topic))
        except SchemaNotFoundError:
            raise _incompatible("Failed to add schema to an active topic with empty(BYTES) schema: new schema type "
                                f"{schema.type.name}") from None
        except SchemaError as exc:
            raise _incompatible(str(exc)) from None

    # -- lookups
    def get(self, topic: TopicName, version: bytes | None) -> SchemaVersion:
        """The schema at `version` (8 bytes; the latest when None), for GET_SCHEMA."""
        sid = schema_id(topic)
        try:
            number = None if version is None else version_from_bytes(version)
            return self.registry.get(sid, number)
        except (SchemaNotFoundError, InvalidSchemaError) as exc:
            raise BrokerServiceError(pb.TopicNotFound, f"Topic not found or no-schema {topic}: {exc}") from None

    def delete_topic(self, topic: TopicName) -> None:
        """A deleted non-partitioned or whole partitioned topic's schema goes with it; one
        partition's deletion leaves the schema its siblings share (as Pulsar)."""
        if topic.partition_index < 0:
            self.registry.delete_all(schema_id(topic))


def _incompatible(message: str) -> BrokerServiceError:
    return BrokerServiceError(pb.IncompatibleSchema, message)
