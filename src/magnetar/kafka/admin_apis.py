"""CreateTopics, DeleteTopics and DescribeConfigs: Kafka's admin calls on the namespace's topics.

A Kafka topic of n partitions is a Pulsar partitioned topic of n partitions (replication
factors and replica assignments mean nothing on one broker and are ignored). DescribeConfigs
reports the few Kafka settings that follow from the broker's configuration.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.errors import BrokerServiceError, InvalidPartitionCountError
from magnetar.kafka.access import CREATE_TOPIC, DELETE_TOPIC, LOOKUP, Access, Unauthorized
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request
from magnetar.kafka.topics import KafkaTopics, UnknownPartition

_NO_WAIT = datetime.timedelta(0)
CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS = 19, 20, 32
_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4
_DEFAULT_CONFIG, _STATIC_BROKER_CONFIG = 5, 4  # Kafka's ConfigSource values


class AdminApis:
    def __init__(self, topics: KafkaTopics, config: ServiceConfiguration) -> None:
        self._topics = topics
        self._config = config

    def create_topics(self, request: Request, access: Access) -> Any:
        module = response_module(CREATE_TOPICS, request.api_version)
        body = request.body
        results = []
        for topic in body.topics:
            partitions = topic.num_partitions if topic.num_partitions > 0 else self._config.defaultNumPartitions
            error, message = _refusal(access, CREATE_TOPIC, topic.name) or self._create(
                topic.name, partitions, body.validate_only)
            results.append(build(module, "CreatableTopicResult", name=topic.name, topic_id=uuid.UUID(int=0),
                                 error_code=error, error_message=message, topic_config_error_code=0,
                                 num_partitions=partitions, replication_factor=1, configs=None))
        return build(module, "CreateTopicsResponse", throttle_time=_NO_WAIT, topics=tuple(results))

    def _create(self, name: str, partitions: int, validate_only: bool) -> tuple[ErrorCode, str | None]:
        if not name or "/" in name or name in (".", ".."):
            return ErrorCode.invalid_topic_exception, f"{name!r} is not a topic name"
        if self._topics.partitions(name) is not None:
            return ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
        if validate_only:
            return ErrorCode.none, None
        try:
            self._topics.create(name, partitions)
        except InvalidPartitionCountError as exc:
            return ErrorCode.invalid_partitions, exc.message
        except BrokerServiceError as exc:
            return ErrorCode.invalid_request, exc.message
        return ErrorCode.none, None

    def delete_topics(self, request: Request, access: Access) -> Any:
        module = response_module(DELETE_TOPICS, request.api_version)
        body = request.body
        names = getattr(body, "topic_names", None)
        if names is None:
            names = tuple(t.name for t in body.topics)
        results = tuple(build(module, "DeletableTopicResult", name=name, topic_id=uuid.UUID(int=0),
                              **dict(zip(("error_code", "error_message"),
                                         _refusal(access, DELETE_TOPIC, name or "") or self._delete(name),
                                         strict=True)))
                        for name in names)
        return build(module, "DeleteTopicsResponse", throttle_time=_NO_WAIT, responses=results)

    def _delete(self, name: str | None) -> tuple[ErrorCode, str | None]:
        if name is None or self._topics.partitions(name) is None:
            return ErrorCode.unknown_topic_or_partition, None
        try:
            self._topics.delete(name)
        except BrokerServiceError as exc:
            return ErrorCode.unknown_server_error, exc.message
        return ErrorCode.none, None

    def describe_configs(self, request: Request, access: Access) -> Any:
        module = response_module(DESCRIBE_CONFIGS, request.api_version)
        results = []
        for resource in request.body.resources:
            error, configs = ErrorCode.none, self._settings()
            refused = _refusal(access, LOOKUP, resource.resource_name) if resource.resource_type == _TOPIC_RESOURCE \
                else None
            if refused is not None:
                error, configs = refused[0], {}
            elif resource.resource_type == _TOPIC_RESOURCE and self._topics.partitions(resource.resource_name) is None:
                error, configs = ErrorCode.unknown_topic_or_partition, {}
            elif resource.resource_type not in (_TOPIC_RESOURCE, _BROKER_RESOURCE):
                error, configs = ErrorCode.invalid_request, {}
            if resource.configuration_keys is not None:
                configs = {k: v for k, v in configs.items() if k in resource.configuration_keys}
            source = _DEFAULT_CONFIG if resource.resource_type == _TOPIC_RESOURCE else _STATIC_BROKER_CONFIG
            entries = tuple(build(module, "DescribeConfigsResourceResult", name=name, value=value, read_only=True,
                                  config_source=source, is_sensitive=False, is_default=True, synonyms=(),
                                  config_type=0, documentation=None) for name, value in configs.items())
            results.append(build(module, "DescribeConfigsResult", error_code=error, error_message=None,
                                 resource_type=resource.resource_type, resource_name=resource.resource_name,
                                 configs=entries))
        return build(module, "DescribeConfigsResponse", throttle_time=_NO_WAIT, results=tuple(results))

    def _settings(self) -> dict[str, str]:
        """Kafka's names for what the broker's configuration decides."""
        config = self._config
        retention_minutes = config.defaultRetentionTimeInMinutes
        return {
            "cleanup.policy": "delete",
            "compression.type": "producer",
            "max.message.bytes": str(config.maxMessageSize),
            "message.timestamp.type": "CreateTime",
            "retention.ms": str(int(retention_minutes * 60_000) if retention_minutes >= 0 else -1),
            "retention.bytes": str(config.defaultRetentionSizeInMB * 1024 * 1024
                                   if config.defaultRetentionSizeInMB >= 0 else -1),
        }


def _refusal(access: Access, operation: Any, topic: str) -> tuple[ErrorCode, str | None] | None:
    """The error a topic's entry carries when the role may not perform `operation` on it."""
    try:
        access.topic(operation, topic)
    except Unauthorized as exc:
        return ErrorCode.topic_authorization_failed, str(exc)
    except UnknownPartition:
        return ErrorCode.unknown_topic_or_partition, None
    return None
