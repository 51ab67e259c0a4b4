"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: a Kafka topic's configurations,
kept with its Pulsar policies (topic_settings), and the broker's, read from broker.conf.

A topic's configurations are read with `lookup` on it and changed by a tenant admin, as
Pulsar's topic policies are (TopicPolicy WRITE). AlterConfigs replaces every
configuration of a topic (those it does not name go back to their defaults),
IncrementalAlterConfigs changes the named ones (SET, DELETE, and APPEND or SUBTRACT on a
list). A bad key or value refuses the whole resource with INVALID_CONFIG and changes
nothing; `validate_only` checks without changing. The broker's configurations are
broker.conf's: described, never altered over Kafka.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.broker.config import ServiceConfiguration
from magnetar.kafka.access import LOOKUP, TOPIC_POLICY_WRITE, Access, refusal
from magnetar.kafka.errors import ANSWERABLE, Answer, kafka_error
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request
from magnetar.kafka.topic_configs import KEYS, ConfigType, InvalidConfig, key, normalized
from magnetar.kafka.topic_settings import DEFAULT_CONFIG, STATIC_BROKER_CONFIG, Entry, TopicSettings

_NO_WAIT = datetime.timedelta(0)
DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_RETENTION_MS = str(7 * 24 * 3600 * 1000)


def _refusal(access: Access, operation: Any, topic: str) -> Answer | None:
    """The error a topic's resource gets when it cannot be used as asked, None when it can."""
    refused = refusal(access, operation, topic)
    if refused is None and access.topics.partitions(topic) is None:
        return ErrorCode.unknown_topic_or_partition, f"Topic '{topic}' does not exist"
    return refused


class ConfigApis:
    def __init__(self, config: ServiceConfiguration) -> None:
        self._config = config

    # -- describing
    def describe_configs(self, request: Request, access: Access) -> Any:
        module = response_module(DESCRIBE_CONFIGS, request.api_version)
        results = []
        for resource in request.body.resources:
            error, message, entries = self._described(resource, access)
            if resource.configuration_keys is not None:
                entries = [entry for entry in entries if entry.name in resource.configuration_keys]
            configs = tuple(build(module, "DescribeConfigsResourceResult", name=entry.name, value=entry.value,
                                  read_only=resource.resource_type != TOPIC_RESOURCE, config_source=entry.source,
                                  is_sensitive=False, is_default=entry.is_default, synonyms=(),
                                  config_type=_type(entry.name), documentation=None) for entry in entries)
            results.append(build(module, "DescribeConfigsResult", error_code=error, error_message=message,
                                 resource_type=resource.resource_type, resource_name=resource.resource_name,
                                 configs=configs))
        return build(module, "DescribeConfigsResponse", throttle_time=_NO_WAIT, results=tuple(results))

    def _described(self, resource: Any, access: Access) -> tuple[ErrorCode, str | None, list[Entry]]:
        if resource.resource_type == BROKER_RESOURCE:
            return ErrorCode.none, None, self._broker_entries()
        if resource.resource_type != TOPIC_RESOURCE:
            return ErrorCode.invalid_request, f"resource type {resource.resource_type} has no configurations here", []
        refused = _refusal(access, LOOKUP, resource.resource_name)
        if refused is not None:
            return *refused, []
        return ErrorCode.none, None, TopicSettings(access.topics, resource.resource_name).describe()

    def _broker_entries(self) -> list[Entry]:
        """Kafka's broker keys for what broker.conf decides, and Kafka's defaults for the topics
        Kafka clients create (see topic_settings)."""
        config = self._config
        compact = config.brokerServiceCompactionThresholdInBytes > 0
        return [
            Entry("auto.create.topics.enable", str(config.allowAutoTopicCreation).lower(), STATIC_BROKER_CONFIG),
            Entry("default.replication.factor", "1", DEFAULT_CONFIG),
            Entry("log.cleanup.policy", "compact" if compact else "delete",
                  STATIC_BROKER_CONFIG if compact else DEFAULT_CONFIG),
            Entry("log.message.timestamp.type", "CreateTime", DEFAULT_CONFIG),
            Entry("log.retention.bytes", "-1", DEFAULT_CONFIG),
            Entry("log.retention.ms", _RETENTION_MS, DEFAULT_CONFIG),
            Entry("message.max.bytes", str(config.maxMessageSize), STATIC_BROKER_CONFIG),
            Entry("min.insync.replicas", "1", DEFAULT_CONFIG),
            Entry("num.partitions", str(config.defaultNumPartitions), STATIC_BROKER_CONFIG),
        ]

    # -- altering
    def alter_configs(self, request: Request, access: Access) -> Any:
        return self._alter(request, access, ALTER_CONFIGS, "AlterConfigsResponse",
                           lambda resource: ({c.name: c.value for c in resource.configs}, True))

    def incremental_alter_configs(self, request: Request, access: Access) -> Any:
        return self._alter(request, access, INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigsResponse",
                           lambda resource: (_operations(resource, access), False))

    def _alter(self, request: Request, access: Access, api_key: int, response: str, changes_of: Any) -> Any:
        module = response_module(api_key, request.api_version)
        body = request.body
        names = [(resource.resource_type, resource.resource_name) for resource in body.resources]
        results = []
        for resource in body.resources:
            if names.count((resource.resource_type, resource.resource_name)) > 1:
                error, message = ErrorCode.invalid_request, f"{resource.resource_name} is named more than once"
            else:
                error, message = self._altered(resource, access, changes_of, body.validate_only)
            results.append(build(module, "AlterConfigsResourceResponse", error_code=error, error_message=message,
                                 resource_type=resource.resource_type, resource_name=resource.resource_name))
        return build(module, response, throttle_time=_NO_WAIT, responses=tuple(results))

    @staticmethod
    def _altered(resource: Any, access: Access, changes_of: Any, validate_only: bool) -> Answer:
        if resource.resource_type == BROKER_RESOURCE:
            return ErrorCode.invalid_config, "the broker's configuration is its broker.conf: change it there"
        if resource.resource_type != TOPIC_RESOURCE:
            return ErrorCode.invalid_request, f"resource type {resource.resource_type} has no configurations here"
        topic = resource.resource_name
        refused = _refusal(access, TOPIC_POLICY_WRITE, topic)
        if refused is not None:
            return refused
        settings = TopicSettings(access.topics, topic)
        try:
            changes, replace = changes_of(resource)
            writes = settings.plan(normalized(changes), replace=replace)
        except ANSWERABLE as exc:
            return kafka_error(exc, otherwise=ErrorCode.invalid_request)
        if not validate_only:
            settings.apply(writes)
        return ErrorCode.none, None


#: Kafka's types of the broker keys described (topic keys: topic_configs').
_BROKER_TYPES = {"auto.create.topics.enable": ConfigType.BOOLEAN, "default.replication.factor": ConfigType.INT,
                 "log.cleanup.policy": ConfigType.LIST, "log.message.timestamp.type": ConfigType.STRING,
                 "log.retention.bytes": ConfigType.LONG, "log.retention.ms": ConfigType.LONG,
                 "message.max.bytes": ConfigType.INT, "num.partitions": ConfigType.INT}


def _type(name: str) -> int:
    found = KEYS.get(name)
    return int(found.type if found is not None else _BROKER_TYPES[name])


def _operations(resource: Any, access: Access) -> dict[str, str | None]:
    """IncrementalAlterConfigs' operations as values (None: DELETE), lists worked out against
    the topic's current ones; InvalidConfig for an operation the key does not take."""
    seen = [config.name for config in resource.configs]
    if len(set(seen)) != len(seen):
        raise InvalidConfig("a configuration is named more than once")
    current: dict[str, str] | None = None
    changes: dict[str, str | None] = {}
    for config in resource.configs:
        operation, name = config.config_operation, config.name
        known = key(name)
        if operation == SET:
            changes[name] = config.value
        elif operation == DELETE:
            changes[name] = None
        elif operation in (APPEND, SUBTRACT) and known.type == ConfigType.LIST:
            if current is None:
                current = {e.name: e.value for e in TopicSettings(access.topics, resource.resource_name).describe()}
            items = [item for item in current[name].split(",") if item]
            given = [item.strip() for item in (config.value or "").split(",") if item.strip()]
            items = items + [item for item in given if item not in items] if operation == APPEND \
                else [item for item in items if item not in given]
            changes[name] = ",".join(items) if items else None
        else:
            raise InvalidConfig(f"operation {operation} is not for {name} (APPEND and SUBTRACT take lists)")
    return changes
