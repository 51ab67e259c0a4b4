"""Kafka's admin requests answered exactly, request by request, by a broker in this process
(so scripts/mutation.py's `kafka-admin` target mutates the code they run): CreateTopics with
configurations, DeleteTopics, Describe/Alter/IncrementalAlterConfigs, CreatePartitions,
DeleteRecords, DescribeCluster, Metadata's auto-creation."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator

import pytest
from admin_http import http
from kafka_brokers import RawKafka, batch
from kafka_in_process import start
from kio.schema.alter_configs.v2 import request as alter
from kio.schema.create_partitions.v3 import request as partitions_request
from kio.schema.create_topics.v4 import request as create_v4
from kio.schema.create_topics.v7 import request as create
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v5 import request as delete_topics_v5
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_cluster.v1 import request as cluster
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v4 import request as describe
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental
from kio.schema.metadata.v12 import request as metadata

TIMEOUT = datetime.timedelta(seconds=10)
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
WEEK_MS = str(7 * 24 * 3600 * 1000)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[object, int]]:
    broker, ports = start({"brokerServiceCompactionThresholdInBytes": 0, "maxMessageSize": 1 << 20,
                           "defaultNumPartitions": 3})
    yield broker, ports["PLAINTEXT"]
    broker.stop()


@pytest.fixture
def kafka(served) -> Iterator[RawKafka]:
    raw = RawKafka(f"127.0.0.1:{served[1]}")
    yield raw
    raw.close()


def _name() -> str:
    return f"a-{uuid.uuid4().hex[:10]}"


def _rest(served, method: str, path: str, body: object = None) -> tuple[int, object]:
    status, _, answer = http(method, f"{served[0].admin_url}/admin/v2/{path}",
                             None if body is None else json.dumps(body).encode())
    return status, json.loads(answer) if answer else None


def _create(kafka: RawKafka, name: str, count: int = 1, configs: dict[str, str | None] | None = None,
            validate_only: bool = False, assignments: tuple = ()) -> object:
    topic = create.CreatableTopic(name=name, num_partitions=count, replication_factor=-1, assignments=assignments,
                                  configs=tuple(create.CreatableTopicConfig(name=k, value=v)
                                                for k, v in (configs or {}).items()))
    (result,) = kafka.call(19, 7, create.CreateTopicsRequest(topics=(topic,), timeout=TIMEOUT,
                                                             validate_only=validate_only)).topics
    return result


def _describe(kafka: RawKafka, name: str, keys: tuple[str, ...] | None = None, kind: int = TOPIC) -> object:
    resource = describe.DescribeConfigsResource(resource_type=kind, resource_name=name, configuration_keys=keys)
    (result,) = kafka.call(32, 4, describe.DescribeConfigsRequest(resources=(resource,), include_synonyms=False,
                                                                  include_documentation=False)).results
    return result


def _values(kafka: RawKafka, name: str) -> dict[str, tuple[str, int]]:
    return {c.name: (c.value, c.config_source) for c in _describe(kafka, name).configs}


def _incremental(kafka: RawKafka, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False,
                 kind: int = TOPIC) -> object:
    configs = tuple(incremental.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops)
    resource = incremental.AlterConfigsResource(resource_type=kind, resource_name=name, configs=configs)
    (result,) = kafka.call(44, 1, incremental.IncrementalAlterConfigsRequest(
        resources=(resource,), validate_only=validate_only)).responses
    return result


def _alter(kafka: RawKafka, name: str, configs: dict[str, str | None], validate_only: bool = False) -> object:
    resource = alter.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=tuple(
        alter.AlterableConfig(name=k, value=v) for k, v in configs.items()))
    (result,) = kafka.call(33, 2, alter.AlterConfigsRequest(resources=(resource,),
                                                            validate_only=validate_only)).responses
    return result


def _grow(kafka: RawKafka, *topics: tuple[str, int], validate_only: bool = False, assignments=None) -> list:
    request = partitions_request.CreatePartitionsRequest(topics=tuple(
        partitions_request.CreatePartitionsTopic(name=name, count=count, assignments=assignments)
        for name, count in topics), timeout=TIMEOUT, validate_only=validate_only)
    return [(r.name, r.error_code, r.error_message) for r in kafka.call(37, 3, request).results]


def _delete_records(kafka: RawKafka, name: str, *offsets: tuple[int, int]) -> list[tuple[int, int, ErrorCode]]:
    request = delete_records.DeleteRecordsRequest(topics=(delete_records.DeleteRecordsTopic(name=name, partitions=tuple(
        delete_records.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in offsets)),), timeout=TIMEOUT)
    (topic,) = kafka.call(21, 2, request).topics
    return [(p.partition_index, p.low_watermark, p.error_code) for p in topic.partitions]


# -- CreateTopics and DescribeConfigs
def test_create_topics_stores_configs_and_answers_them_with_their_sources(served, kafka) -> None:
    name = _name()
    result = _create(kafka, name, 3, {"retention.ms": " 120000", "retention.bytes": str(5 << 20),
                                      "cleanup.policy": "compact", "segment.bytes": str(3 << 20),
                                      "message.timestamp.type": "LogAppendTime", "preallocate": "TRUE",
                                      "min.cleanable.dirty.ratio": "0.25"})
    assert (result.error_code, result.error_message, result.num_partitions, result.replication_factor,
            result.topic_id, result.topic_config_error_code) == (ErrorCode.none, None, 3, 1, None, 0)  # no ids
    answered = {c.name: (c.value, c.config_source, c.read_only, c.is_sensitive) for c in result.configs}
    assert answered["retention.ms"] == ("120000", 1, False, False)
    assert answered["segment.index.bytes"] == ("10485760", 5, False, False)
    values = _values(kafka, name)
    assert values["retention.ms"] == ("120000", 1) and values["retention.bytes"] == (str(5 << 20), 1)
    assert values["cleanup.policy"] == ("compact", 1) and values["preallocate"] == ("true", 1)
    assert values["message.timestamp.type"] == ("LogAppendTime", 1)
    assert values["min.cleanable.dirty.ratio"] == ("0.25", 1)
    assert values["max.message.bytes"] == (str(1 << 20), 4)  # the broker's maxMessageSize
    assert values["flush.messages"] == (str(2**63 - 1), 5)
    assert _rest(served, "GET", f"persistent/public/default/{name}/retention") == (
        200, {"retentionTimeInMinutes": 2, "retentionSizeInMB": 5})
    assert _rest(served, "GET", f"persistent/public/default/{name}/compactionThreshold") == (200, 3 << 20)
    configs = _describe(kafka, name).configs
    assert [c.name for c in configs] == sorted(c.name for c in configs)
    types = {c.name: c.config_type for c in configs}
    assert (types["preallocate"], types["compression.type"], types["segment.bytes"], types["retention.ms"],
            types["min.cleanable.dirty.ratio"], types["cleanup.policy"]) == (1, 2, 3, 5, 6, 7)
    assert all(not c.is_sensitive and c.synonyms == () for c in configs)


def test_a_topic_created_without_configs_gets_kafkas_retention_and_reports_defaults(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name).error_code == ErrorCode.none
    values = _values(kafka, name)
    assert values["retention.ms"] == (WEEK_MS, 1) and values["retention.bytes"] == ("-1", 1)
    assert values["cleanup.policy"] == ("delete", 5) and values["message.timestamp.type"] == ("CreateTime", 5)
    assert _rest(served, "GET", f"persistent/public/default/{name}/compactionThreshold") == (200, None)
    filtered = _describe(kafka, name, keys=("cleanup.policy", "no.such"))
    assert [(c.name, c.value) for c in filtered.configs] == [("cleanup.policy", "delete")]


def test_a_namespace_retention_is_left_to_the_namespace(served, kafka) -> None:
    assert _rest(served, "POST", "namespaces/public/default/retention",
                 {"retentionTimeInMinutes": 30, "retentionSizeInMB": 7})[0] in (200, 204)
    try:
        name = _name()
        assert _create(kafka, name).error_code == ErrorCode.none
        assert _rest(served, "GET", f"persistent/public/default/{name}/retention") == (200, None)
        values = _values(kafka, name)
        assert values["retention.ms"] == ("1800000", 3) and values["retention.bytes"] == (str(7 << 20), 3)
        # set on the topic, then back to the default: the namespace decides again
        assert _incremental(kafka, name, ("retention.ms", SET, "60000")).error_code == ErrorCode.none
        assert _values(kafka, name)["retention.ms"] == ("60000", 1)
        assert _values(kafka, name)["retention.bytes"] == (str(7 << 20), 1)
        assert _incremental(kafka, name, ("retention.ms", DELETE, None),
                            ("retention.bytes", DELETE, None)).error_code == ErrorCode.none
        assert _values(kafka, name)["retention.ms"] == ("1800000", 3)
        auto = _name()
        assert _metadata(kafka, auto) == (ErrorCode.none, 3)
        assert _rest(served, "GET", f"persistent/public/default/{auto}/retention") == (200, None)
    finally:
        _rest(served, "DELETE", "namespaces/public/default/retention")


def _metadata(kafka: RawKafka, name: str, create_topic: bool = True) -> tuple[ErrorCode, int]:
    request = metadata.MetadataRequest(topics=(metadata.MetadataRequestTopic(name=name, topic_id=None),),
                                       allow_auto_topic_creation=create_topic,
                                       include_topic_authorized_operations=False)
    (topic,) = kafka.call(3, 12, request).topics
    return topic.error_code, len(topic.partitions)


def test_auto_created_topics_get_kafkas_retention(served, kafka) -> None:
    name = _name()
    assert _metadata(kafka, name, create_topic=False) == (ErrorCode.unknown_topic_or_partition, 0)
    assert _metadata(kafka, name) == (ErrorCode.none, 3)  # defaultNumPartitions
    assert _values(kafka, name)["retention.ms"] == (WEEK_MS, 1)
    assert _metadata(kafka, "bad/name") == (ErrorCode.unknown_topic_or_partition, 0)


@pytest.mark.parametrize(("configs", "words"), [
    ({"no.such": "1"}, "Unknown topic config name: no.such"),
    ({"retention.ms": None}, "null given"),
    ({"retention.ms": "-2"}, "Value must be at least -1"),
    ({"retention.ms": "1.5"}, "expected a long"),
    ({"segment.bytes": str(2**31)}, "expected a int"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "between 0 and 1"),
    ({"min.cleanable.dirty.ratio": "nan"}, "expected a double"),
    ({"preallocate": "yes"}, "expected a boolean"),
    ({"compression.type": "brotli"}, "one of uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"compression.gzip.level": "0"}, "-1 or between 1 and 9"),
    ({"cleanup.policy": ""}, "a list of compact, delete"),
    ({"max.message.bytes": str(2 << 20)}, "over the broker's maxMessageSize (1048576)"),
    ({"retention.bytes": "0"}, "Setting a single time or size limit to 0 is invalid"),
])
def test_a_bad_config_refuses_the_topic(kafka, configs, words) -> None:
    name = _name()
    result = _create(kafka, name, 1, configs)
    assert (result.error_code, result.num_partitions, result.replication_factor, result.configs) == (
        ErrorCode.invalid_config, -1, -1, None)
    assert words in result.error_message
    assert _metadata(kafka, name, create_topic=False)[0] == ErrorCode.unknown_topic_or_partition


def test_create_topics_refusals_and_validate_only(kafka) -> None:
    name = _name()
    checked = _create(kafka, name, 2, {"retention.ms": "1000"}, validate_only=True)
    assert (checked.error_code, checked.num_partitions, checked.configs) == (ErrorCode.none, 2, None)
    assert _metadata(kafka, name, create_topic=False)[0] == ErrorCode.unknown_topic_or_partition
    assert _create(kafka, name, 2).error_code == ErrorCode.none
    again = _create(kafka, name, 2)
    assert (again.error_code, again.error_message) == (ErrorCode.topic_already_exists,
                                                       f"Topic '{name}' already exists.")
    for bad in ("a/b", "", ".", ".."):
        assert _create(kafka, bad).error_code == ErrorCode.invalid_topic_exception
    elsewhere = (create.CreatableReplicaAssignment(partition_index=0, broker_ids=(0, 3)),)
    assert _create(kafka, _name(), 1, assignments=elsewhere).error_code == ErrorCode.invalid_replica_assignment
    here = (create.CreatableReplicaAssignment(partition_index=0, broker_ids=(0,)),)
    assert _create(kafka, _name(), 1, assignments=here).error_code == ErrorCode.none
    too_many = _create(kafka, _name(), 100_000)
    assert too_many.error_code == ErrorCode.invalid_partitions and "less than or equal" in too_many.error_message
    default = _create(kafka, _name(), -1)
    assert (default.error_code, default.num_partitions) == (ErrorCode.none, 3)
    assert (_create(kafka, _name(), 1).num_partitions, _create(kafka, _name(), 2).num_partitions) == (1, 2)
    none = _create(kafka, _name(), 0)
    assert (none.error_code, none.error_message) == (ErrorCode.invalid_partitions,
                                                     "Number of partitions should be more than 0")
    older = kafka.call(19, 4, create_v4.CreateTopicsRequest(topics=(create_v4.CreatableTopic(
        name=_name(), num_partitions=1, replication_factor=1, assignments=(), configs=()),), timeout=TIMEOUT,
        validate_only=False))
    assert [t.error_code for t in older.topics] == [ErrorCode.none]


def test_delete_topics_forgets_their_configs(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name, 2, {"min.insync.replicas": "2"}).error_code == ErrorCode.none
    request = delete_topics.DeleteTopicsRequest(topics=(delete_topics.DeleteTopicState(name=name, topic_id=None),
                                                        delete_topics.DeleteTopicState(name=_name(), topic_id=None)),
                                                timeout=TIMEOUT)
    assert [r.error_code for r in kafka.call(20, 6, request).responses] == [
        ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert _describe(kafka, name).error_code == ErrorCode.unknown_topic_or_partition
    assert _create(kafka, name).error_code == ErrorCode.none
    assert _values(kafka, name)["min.insync.replicas"] == ("1", 5)


def test_a_deleted_topics_partitions_are_forgotten(served, kafka) -> None:
    """A topic deleted and created again with fewer partitions: its old partitions are gone (a
    stale name would store into a partition the topic no longer has)."""
    name = _name()
    assert _create(kafka, name, 3).error_code == ErrorCode.none
    assert kafka.produce(name, batch([b"x"]), partition=2)[0] == ErrorCode.none
    request = delete_topics.DeleteTopicsRequest(topics=(delete_topics.DeleteTopicState(name=name, topic_id=None),),
                                                timeout=TIMEOUT)
    assert [r.error_code for r in kafka.call(20, 6, request).responses] == [ErrorCode.none]
    assert _create(kafka, name, 1).error_code == ErrorCode.none
    assert kafka.produce(name, batch([b"y"]), partition=2) == (ErrorCode.unknown_topic_or_partition, -1)
    assert _rest(served, "GET", f"persistent/public/default/{name}-partition-2/stats")[0] == 404


def test_describe_configs_of_the_broker_and_of_what_has_none(served, kafka) -> None:
    broker = _describe(kafka, "0", kind=BROKER)
    assert [(c.name, c.value, c.config_source, c.read_only, c.config_type) for c in broker.configs] == [
        ("auto.create.topics.enable", "true", 4, True, 1), ("default.replication.factor", "1", 5, True, 3),
        ("log.cleanup.policy", "delete", 5, True, 7), ("log.message.timestamp.type", "CreateTime", 5, True, 2),
        ("log.retention.bytes", "-1", 5, True, 5), ("log.retention.ms", WEEK_MS, 5, True, 5),
        ("message.max.bytes", str(1 << 20), 4, True, 3), ("min.insync.replicas", "1", 5, True, 3),
        ("num.partitions", "3", 4, True, 3)]
    other = _describe(kafka, "x", kind=8)
    assert (other.error_code, other.configs) == (ErrorCode.invalid_request, ())
    missing = _describe(kafka, "gone")
    assert (missing.error_code, missing.error_message, missing.configs) == (
        ErrorCode.unknown_topic_or_partition, "Topic 'gone' does not exist", ())
    assert (other.error_message, broker.error_message) == ("resource type 8 has no configurations here", None)
    name = _name()
    assert _create(kafka, name).error_code == ErrorCode.none
    resource = describe_v1.DescribeConfigsResource(resource_type=TOPIC, resource_name=name, configuration_keys=None)
    (v1,) = kafka.call(32, 1, describe_v1.DescribeConfigsRequest(resources=(resource,), include_synonyms=False)).results
    assert {c.name: c.value for c in v1.configs}["retention.ms"] == WEEK_MS


# -- altering
def test_incremental_alters_set_delete_append_and_subtract(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name, 1, {"min.insync.replicas": "3", "retention.ms": "60000"}).error_code == ErrorCode.none
    answer = _incremental(kafka, name, ("cleanup.policy", APPEND, "compact, delete"),
                          ("min.insync.replicas", DELETE, None), ("segment.ms", SET, "1000"))
    assert (answer.error_code, answer.error_message, answer.resource_name) == (ErrorCode.none, None, name)
    values = _values(kafka, name)
    assert values["cleanup.policy"] == ("delete,compact", 1) and values["min.insync.replicas"] == ("1", 5)
    assert values["segment.ms"] == ("1000", 1) and values["retention.ms"] == ("60000", 1)
    assert _rest(served, "GET", f"persistent/public/default/{name}/compactionThreshold") == (200, 1 << 30)
    assert _incremental(kafka, name, ("segment.bytes", SET, str(4 << 20))).error_code == ErrorCode.none
    assert _rest(served, "GET", f"persistent/public/default/{name}/compactionThreshold") == (200, 4 << 20)
    assert _incremental(kafka, name, ("cleanup.policy", SUBTRACT, "compact")).error_code == ErrorCode.none
    assert _values(kafka, name)["cleanup.policy"] == ("delete", 1)
    assert _rest(served, "GET", f"persistent/public/default/{name}/compactionThreshold") == (200, None)
    assert _incremental(kafka, name, ("cleanup.policy", SUBTRACT, "delete")).error_code == ErrorCode.none
    assert _values(kafka, name)["cleanup.policy"] == ("delete", 5)
    checked = _incremental(kafka, name, ("retention.ms", SET, "5000"), validate_only=True)
    assert checked.error_code == ErrorCode.none and _values(kafka, name)["retention.ms"] == ("60000", 1)


@pytest.mark.parametrize(("ops", "words"), [
    ((("retention.ms", APPEND, "1"),), "operation 2 is not for retention.ms (APPEND and SUBTRACT take lists)"),
    ((("retention.ms", 7, "1"),), "operation 7 is not for retention.ms"),
    ((("retention.ms", SET, "1"), ("retention.ms", SET, "2")), "a configuration is named more than once"),
    ((("no.such", DELETE, None),), "Unknown topic config name: no.such"),
    ((("retention.ms", SET, "x"),), "Invalid value x for configuration retention.ms: expected a long"),
])
def test_a_bad_incremental_alter_changes_nothing(kafka, ops, words) -> None:
    name = _name()
    assert _create(kafka, name, 1, {"retention.ms": "60000"}).error_code == ErrorCode.none
    answer = _incremental(kafka, name, *ops)
    assert answer.error_code == ErrorCode.invalid_config and answer.error_message.startswith(words)
    assert _values(kafka, name)["retention.ms"] == ("60000", 1)


def test_alter_configs_replaces_every_config(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name, 1, {"cleanup.policy": "compact", "retention.ms": "60000", "min.insync.replicas": "2",
                                    "max.message.bytes": "5000"}).error_code == ErrorCode.none
    assert _alter(kafka, name, {"retention.bytes": str(1 << 20)}).error_code == ErrorCode.none
    values = _values(kafka, name)
    assert values["retention.ms"] == (WEEK_MS, 1) and values["retention.bytes"] == (str(1 << 20), 1)
    assert values["cleanup.policy"] == ("delete", 5) and values["min.insync.replicas"] == ("1", 5)
    assert values["max.message.bytes"] == (str(1 << 20), 4)
    assert _rest(served, "GET", f"persistent/public/default/{name}/maxMessageSize") == (200, None)
    checked = _alter(kafka, name, {"retention.ms": "1000"}, validate_only=True)
    assert checked.error_code == ErrorCode.none and _values(kafka, name)["retention.ms"] == (WEEK_MS, 1)
    bad = _alter(kafka, name, {"retention.ms": "-5"})
    assert bad.error_code == ErrorCode.invalid_config and _values(kafka, name)["retention.ms"] == (WEEK_MS, 1)
    missing = _alter(kafka, _name(), {"retention.ms": "1000"})
    assert (missing.error_code, missing.error_message) == (ErrorCode.unknown_topic_or_partition,
                                                           f"Topic '{missing.resource_name}' does not exist")


def test_alters_of_the_broker_and_of_repeated_resources_are_refused(kafka) -> None:
    broker = _incremental(kafka, "0", ("message.max.bytes", SET, "1"), kind=BROKER)
    assert broker.error_code == ErrorCode.invalid_config and "broker.conf" in broker.error_message
    other = _incremental(kafka, "x", ("a", SET, "1"), kind=8)
    assert other.error_code == ErrorCode.invalid_request
    name = _name()
    assert _create(kafka, name).error_code == ErrorCode.none
    resource = incremental.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=(
        incremental.AlterableConfig(name="retention.ms", config_operation=SET, value="1000"),))
    twice = kafka.call(44, 1, incremental.IncrementalAlterConfigsRequest(resources=(resource, resource),
                                                                         validate_only=False)).responses
    assert [r.error_code for r in twice] == [ErrorCode.invalid_request] * 2
    assert _values(kafka, name)["retention.ms"] == (WEEK_MS, 1)


def test_a_delete_policy_over_a_namespace_threshold_is_kept_on_the_topic(served, kafka) -> None:
    assert _rest(served, "POST", "namespaces/public/default/compactionThreshold", 1000)[0] in (200, 204)
    try:
        name = _name()
        assert _create(kafka, name).error_code == ErrorCode.none
        assert _values(kafka, name)["cleanup.policy"] == ("compact", 3)
        assert _incremental(kafka, name, ("cleanup.policy", SET, "delete")).error_code == ErrorCode.none
        assert _rest(served, "GET", f"persistent/public/default/{name}/compactionThreshold") == (200, 0)
        assert _values(kafka, name)["cleanup.policy"] == ("delete", 1)
    finally:
        _rest(served, "DELETE", "namespaces/public/default/compactionThreshold")


# -- CreatePartitions, DeleteRecords, DescribeCluster
def test_create_partitions_grows_only_what_it_may(served, kafka) -> None:
    name, other = _name(), _name()
    assert _create(kafka, name, 2).error_code == ErrorCode.none
    assert _grow(kafka, (name, 4), validate_only=True) == [(name, ErrorCode.none, None)]
    assert _metadata(kafka, name, create_topic=False) == (ErrorCode.none, 2)
    assert _grow(kafka, (name, 4)) == [(name, ErrorCode.none, None)]
    assert _metadata(kafka, name, create_topic=False) == (ErrorCode.none, 4)
    assert _grow(kafka, (name, 4)) == [(name, ErrorCode.invalid_partitions, f"Topic {name} has 4 partitions; 4 would "
                                                                           "not add any")]
    assert _grow(kafka, (other, 3)) == [(other, ErrorCode.unknown_topic_or_partition,
                                         f"Topic '{other}' does not exist")]
    assert [e for _, e, _ in _grow(kafka, (name, 6), (name, 7))] == [ErrorCode.invalid_request] * 2
    elsewhere = (partitions_request.CreatePartitionsAssignment(broker_ids=(1,)),)
    assert _grow(kafka, (name, 5), assignments=elsewhere)[0][1] == ErrorCode.invalid_replica_assignment
    assert _grow(kafka, (name, 100_000))[0][1] == ErrorCode.invalid_partitions
    assert _grow(kafka, ("bad/name", 3))[0][1] == ErrorCode.unknown_topic_or_partition
    single = _name()
    assert _rest(served, "PUT", f"persistent/public/default/{single}")[0] in (200, 204)
    assert _grow(kafka, (single, 3))[0][1:] == (
        ErrorCode.invalid_partitions, f"persistent://public/default/{single} is a non-partitioned Pulsar topic: "
                                      "Pulsar cannot add partitions to it")


def test_delete_records_moves_the_start_and_pulsar_subscriptions_past_them(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name, 2).error_code == ErrorCode.none
    for _ in range(3):
        assert kafka.produce(name, batch([b"a", b"b", b"c", b"d"]))[0] == ErrorCode.none
    assert _rest(served, "PUT", f"persistent/public/default/{name}-partition-0/subscription/pulsar-reader",
                 {"ledgerId": -1, "entryId": -1})[0] in (200, 204)  # from the earliest message
    stats = f"persistent/public/default/{name}-partition-0/stats"
    assert _rest(served, "GET", stats)[1]["subscriptions"]["pulsar-reader"]["msgBacklog"] == 3  # entries
    assert _delete_records(kafka, name, (0, 6)) == [(0, 6, ErrorCode.none)]
    assert _delete_records(kafka, name, (0, 2)) == [(0, 6, ErrorCode.none)]  # never back
    # the first entry (offsets 0-3) is acknowledged for it; the one holding offset 6 stays whole
    assert _rest(served, "GET", stats)[1]["subscriptions"]["pulsar-reader"]["msgBacklog"] == 2
    assert _delete_records(kafka, name, (0, -1), (1, 0)) == [(0, 12, ErrorCode.none), (1, 0, ErrorCode.none)]
    assert _delete_records(kafka, name, (0, 13), (0, -5)) == [(0, -1, ErrorCode.offset_out_of_range)] * 2
    assert _delete_records(kafka, name, (7, 0)) == [(7, -1, ErrorCode.unknown_topic_or_partition)]
    assert kafka.latest(name) == 12


def test_describe_cluster_names_this_broker(served, kafka) -> None:
    answer = kafka.call(60, 1, cluster.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                              endpoint_type=1))
    assert (answer.error_code, answer.cluster_id, answer.controller_id, answer.endpoint_type) == (
        ErrorCode.none, "magnetar", 0, 1)
    assert [(b.broker_id, b.host, b.port) for b in answer.brokers] == [(0, "127.0.0.1", served[1])]


def test_a_threshold_set_over_pulsars_admin_api_outlives_unrelated_alters(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name).error_code == ErrorCode.none
    assert _rest(served, "POST", f"persistent/public/default/{name}/compactionThreshold", 5000)[0] in (200, 204)
    assert _incremental(kafka, name, ("segment.bytes", SET, str(2 << 20)),
                        ("retention.ms", SET, "1000")).error_code == ErrorCode.none
    assert _rest(served, "GET", f"persistent/public/default/{name}/compactionThreshold") == (200, 5000)
    assert _values(kafka, name)["cleanup.policy"] == ("compact", 1)


def test_partitions_are_found_only_where_they_are(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name, 3).error_code == ErrorCode.none
    assert kafka.produce(name, batch([b"x"]), partition=2) == (ErrorCode.none, 0)
    # deleted over Kafka and made again a non-partitioned Pulsar topic: partition 0 is the topic itself
    again = _name()
    assert _create(kafka, again, 2).error_code == ErrorCode.none
    request = delete_topics.DeleteTopicsRequest(topics=(delete_topics.DeleteTopicState(name=again, topic_id=None),),
                                                timeout=TIMEOUT)
    assert kafka.produce(again, batch([b"x"])) == (ErrorCode.none, 0)
    assert [r.error_code for r in kafka.call(20, 6, request).responses] == [ErrorCode.none]
    assert _rest(served, "PUT", f"persistent/public/default/{again}")[0] in (200, 204)
    assert _metadata(kafka, again, create_topic=False) == (ErrorCode.none, 1)
    assert kafka.produce(again, batch([b"y"])) == (ErrorCode.none, 0)
    assert _rest(served, "GET", f"persistent/public/default/{again}/stats")[1]["msgInCounter"] == 1
    assert kafka.produce(name, batch([b"x"]), partition=2) == (ErrorCode.none, 1)  # the name remembered
    assert kafka.produce(name, batch([b"x"]), partition=3) == (ErrorCode.unknown_topic_or_partition, -1)
    assert kafka.produce(name, batch([b"x"]), partition=-1) == (ErrorCode.unknown_topic_or_partition, -1)
    for bad in ("a/b", ".", "..", ""):
        assert kafka.produce(bad, batch([b"x"])) == (ErrorCode.unknown_topic_or_partition, -1), bad
    single = _name()  # a non-partitioned Pulsar topic is Kafka's partition 0
    assert _rest(served, "PUT", f"persistent/public/default/{single}")[0] in (200, 204)
    assert kafka.produce(single, batch([b"a", b"b"])) == (ErrorCode.none, 0)
    assert kafka.produce(single, batch([b"a"]), partition=1) == (ErrorCode.unknown_topic_or_partition, -1)
    assert _rest(served, "GET", f"persistent/public/default/{single}/stats")[1]["msgInCounter"] == 2
    # deleted over Pulsar's admin API: the remembered name is dropped, and a new topic is found
    assert _rest(served, "DELETE", f"persistent/public/default/{name}/partitions")[0] in (200, 204)
    assert kafka.produce(name, batch([b"x"]), partition=2)[0] == ErrorCode.unknown_topic_or_partition
    assert _create(kafka, name, 3).error_code == ErrorCode.none
    assert kafka.produce(name, batch([b"x"]), partition=2) == (ErrorCode.none, 0)


def test_delete_topics_by_name_in_older_versions(kafka) -> None:
    name = _name()
    assert _create(kafka, name).error_code == ErrorCode.none
    answer = kafka.call(20, 5, delete_topics_v5.DeleteTopicsRequest(topic_names=(name, _name()), timeout=TIMEOUT))
    assert [(r.name, r.error_code) for r in answer.responses] == [
        (name, ErrorCode.none), (answer.responses[1].name, ErrorCode.unknown_topic_or_partition)]


@pytest.mark.parametrize(("configs", "described", "applied"), [
    ({"retention.ms": "-1", "retention.bytes": "-1"}, ("-1", "-1"), {"retentionTimeInMinutes": -1,
                                                                     "retentionSizeInMB": -1}),
    ({"retention.ms": "0", "retention.bytes": "0"}, ("0", "0"), {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}),
    ({"retention.ms": "60000", "retention.bytes": "-7"}, ("60000", "-1"), {"retentionTimeInMinutes": 1,
                                                                          "retentionSizeInMB": -1}),
    ({"retention.ms": "90000", "retention.bytes": "1"}, ("90000", str(1 << 20)), {"retentionTimeInMinutes": 1.5,
                                                                                 "retentionSizeInMB": 1}),
])
def test_retention_in_kafkas_units_and_pulsars(served, kafka, configs, described, applied) -> None:
    name = _name()
    assert _create(kafka, name, 1, configs).error_code == ErrorCode.none
    values = _values(kafka, name)
    assert (values["retention.ms"][0], values["retention.bytes"][0]) == described
    assert _rest(served, "GET", f"persistent/public/default/{name}/retention") == (200, applied)


def test_list_operations_without_a_value_change_nothing(kafka) -> None:
    name = _name()
    assert _create(kafka, name, 1, {"cleanup.policy": "compact"}).error_code == ErrorCode.none
    assert _incremental(kafka, name, ("cleanup.policy", APPEND, None)).error_code == ErrorCode.none
    assert _values(kafka, name)["cleanup.policy"] == ("compact", 1)
    assert _incremental(kafka, name, ("cleanup.policy", SUBTRACT, None)).error_code == ErrorCode.none
    assert _values(kafka, name)["cleanup.policy"] == ("compact", 1)


def test_a_threshold_of_one_byte_is_compaction(served, kafka) -> None:
    name = _name()
    assert _create(kafka, name).error_code == ErrorCode.none
    assert _rest(served, "POST", f"persistent/public/default/{name}/compactionThreshold", 1)[0] in (200, 204)
    assert _values(kafka, name)["cleanup.policy"] == ("compact", 1)
