"""CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords: Kafka's admin calls on the
namespace's topics.

A Kafka topic of n partitions is a Pulsar partitioned topic of n partitions (replication
factors and replica assignments mean nothing on one broker: a replica on a broker other
than this one is refused, the rest ignored). CreateTopics takes the topic's configurations
(topic_settings: its Pulsar policies), checked before anything is created; CreatePartitions
grows the partitioned topic as Pulsar's partition update does; DeleteRecords moves a
partition's start past the records below an offset.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.errors import BrokerServiceError
from magnetar.kafka import log_view
from magnetar.kafka.access import CREATE_TOPIC, DELETE_RECORDS, DELETE_TOPIC, TOPIC_POLICY_WRITE, Access, refusal
from magnetar.kafka.errors import ANSWERABLE, Answer, kafka_error
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request
from magnetar.kafka.topic_configs import InvalidConfig, normalized
from magnetar.kafka.topic_settings import TopicSettings

_NO_WAIT = datetime.timedelta(0)
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS_KEY, CREATE_PARTITIONS = 19, 20, 21, 37
_HIGH_WATERMARK = -1  # DeleteRecords' offset for "everything stored"
_NODE_ID = 0


def _valid_name(name: str | None) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..")  # type: ignore[operator]


class AdminApis:
    def __init__(self, config: ServiceConfiguration) -> None:
        self._config = config

    # -- CreateTopics
    def create_topics(self, request: Request, access: Access) -> Any:
        module = response_module(CREATE_TOPICS, request.api_version)
        body = request.body
        results = []
        for topic in body.topics:
            # -1: the broker's default (Kafka's rule); 0 and other counts are checked as Pulsar's
            partitions = self._config.defaultNumPartitions if topic.num_partitions == -1 else topic.num_partitions
            error, message = refusal(access, CREATE_TOPIC, topic.name) or self._create(
                access, topic, partitions, body.validate_only)
            configs = None
            if error == ErrorCode.none and not body.validate_only and hasattr(module, "CreatableTopicConfigs"):  # v5+
                configs = tuple(build(module, "CreatableTopicConfigs", name=entry.name, value=entry.value,
                                      read_only=False, config_source=entry.source, is_sensitive=False)
                                for entry in TopicSettings(access.topics, topic.name).describe())
            results.append(build(module, "CreatableTopicResult", name=topic.name, topic_id=uuid.UUID(int=0),
                                 error_code=error, error_message=message, topic_config_error_code=0,
                                 num_partitions=partitions if error == ErrorCode.none else -1,
                                 replication_factor=1 if error == ErrorCode.none else -1, configs=configs))
        return build(module, "CreateTopicsResponse", throttle_time=_NO_WAIT, topics=tuple(results))

    def _create(self, access: Access, topic: Any, partitions: int, validate_only: bool) -> Answer:
        name = topic.name
        if not _valid_name(name):
            return ErrorCode.invalid_topic_exception, f"{name!r} is not a topic name"
        if access.topics.partitions(name) is not None:
            return ErrorCode.topic_already_exists, f"Topic '{name}' already exists."
        if any(not _here(assignment.broker_ids) for assignment in topic.assignments):
            return ErrorCode.invalid_replica_assignment, f"this cluster has one broker, {_NODE_ID}"
        settings = TopicSettings(access.topics, name)
        try:
            given = {config.name: config.value for config in topic.configs}
            if any(value is None for value in given.values()):
                raise InvalidConfig("a topic's configuration needs a value (null given)")
            writes = settings.plan(normalized(given), kafka_retention=True)
            access.topics.broker.check_partition_count(partitions)
            if not validate_only:
                access.topics.create(name, partitions)
        except ANSWERABLE as exc:
            return kafka_error(exc, otherwise=ErrorCode.invalid_request)
        if not validate_only:
            settings.apply(writes)
        return ErrorCode.none, None

    def auto_create(self, access: Access, name: str) -> int | None:
        """A topic a Metadata request names, created with the defaults (Kafka's auto-creation):
        `defaultNumPartitions` and a Kafka topic's retention; its partition count, None when
        it cannot be."""
        if not _valid_name(name):
            return None
        settings = TopicSettings(access.topics, name)
        try:
            writes = settings.plan({}, kafka_retention=True)
            access.topics.create(name, self._config.defaultNumPartitions)
        except (InvalidConfig, BrokerServiceError):
            return access.topics.partitions(name)  # another request created it meanwhile, or it cannot be
        settings.apply(writes)
        return access.topics.partitions(name)

    # -- DeleteTopics
    def delete_topics(self, request: Request, access: Access) -> Any:
        module = response_module(DELETE_TOPICS, request.api_version)
        body = request.body
        names = getattr(body, "topic_names", None)
        if names is None:
            names = tuple(t.name for t in body.topics)
        results = []
        for name in names:
            error, message = refusal(access, DELETE_TOPIC, name or "") or self._delete(access, name)
            results.append(build(module, "DeletableTopicResult", name=name, topic_id=uuid.UUID(int=0),
                                 error_code=error, error_message=message))
        return build(module, "DeleteTopicsResponse", throttle_time=_NO_WAIT, responses=tuple(results))

    @staticmethod
    def _delete(access: Access, name: str | None) -> Answer:
        if name is None or access.topics.partitions(name) is None:
            return ErrorCode.unknown_topic_or_partition, None
        try:
            access.topics.delete(name)
        except ANSWERABLE as exc:
            return kafka_error(exc)
        return ErrorCode.none, None

    # -- CreatePartitions
    def create_partitions(self, request: Request, access: Access) -> Any:
        module = response_module(CREATE_PARTITIONS, request.api_version)
        body = request.body
        names = [topic.name for topic in body.topics]
        results = []
        for topic in body.topics:
            if names.count(topic.name) > 1:
                error, message = ErrorCode.invalid_request, f"topic {topic.name} is named more than once"
            else:
                error, message = refusal(access, TOPIC_POLICY_WRITE, topic.name) or self._grow(
                    access, topic, body.validate_only)
            results.append(build(module, "CreatePartitionsTopicResult", name=topic.name, error_code=error,
                                 error_message=message))
        return build(module, "CreatePartitionsResponse", throttle_time=_NO_WAIT, results=tuple(results))

    @staticmethod
    def _grow(access: Access, topic: Any, validate_only: bool) -> Answer:
        name, count = topic.name, topic.count
        pulsar_name = access.topics.pulsar_name(name)
        current = access.topics.broker.partitions(pulsar_name) if _valid_name(name) else None
        if current is None:
            return ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist"
        if current == 0:
            return ErrorCode.invalid_partitions, (f"{pulsar_name} is a non-partitioned Pulsar topic: Pulsar cannot "
                                                  f"add partitions to it")
        if count <= current:
            return ErrorCode.invalid_partitions, f"Topic {name} has {current} partitions; {count} would not add any"
        if any(not _here(assignment.broker_ids) for assignment in topic.assignments or ()):
            return ErrorCode.invalid_replica_assignment, f"this cluster has one broker, {_NODE_ID}"
        try:
            access.topics.broker.check_partition_count(count)
            if not validate_only:
                access.topics.broker.update_partitions(pulsar_name, count)
        except ANSWERABLE as exc:
            return kafka_error(exc, otherwise=ErrorCode.invalid_request)
        return ErrorCode.none, None

    # -- DeleteRecords
    def delete_records(self, request: Request, access: Access) -> Any:
        module = response_module(DELETE_RECORDS_KEY, request.api_version)
        topics = []
        for topic in request.body.topics:
            refused = refusal(access, DELETE_RECORDS, topic.name)
            partitions = tuple(build(module, "DeleteRecordsPartitionResult", partition_index=part.partition_index,
                                     **self._deleted(access, topic.name, part, refused)) for part in topic.partitions)
            topics.append(build(module, "DeleteRecordsTopicResult", name=topic.name, partitions=partitions))
        return build(module, "DeleteRecordsResponse", throttle_time=_NO_WAIT, topics=tuple(topics))

    @staticmethod
    def _deleted(access: Access, topic: str, part: Any, refused: Answer | None) -> dict:
        if refused is not None:
            return {"low_watermark": -1, "error_code": refused[0]}
        try:
            log = access.topics.log(topic, part.partition_index)
        except ANSWERABLE as exc:
            return {"low_watermark": -1, "error_code": kafka_error(exc)[0]}
        end = log.end_offset()
        offset = end if part.offset == _HIGH_WATERMARK else part.offset
        if not 0 <= offset <= end:
            return {"low_watermark": -1, "error_code": ErrorCode.offset_out_of_range}
        log.delete_before(offset)
        return {"low_watermark": log_view.start_offset(log), "error_code": ErrorCode.none}


def _here(broker_ids: Any) -> bool:
    return all(broker == _NODE_ID for broker in broker_ids)
