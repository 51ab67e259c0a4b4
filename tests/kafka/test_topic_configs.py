"""A Kafka topic's configurations kept as its Pulsar policies, and the admin calls a Kafka admin
client makes (describe cluster, describe/alter configs, create partitions, delete records,
consumer groups and their offsets), through confluent-kafka's AdminClient and kafka-python's
KafkaAdminClient; what `magnetar admin` reads of the same topics agrees."""

from __future__ import annotations

import json
import random
import uuid

import pytest
from admin_http import http
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from kafka_brokers import start_kafka_broker
from polling import wait_for

from magnetar.client import Client as MagnetarClient

NAMESPACE = "public/default"
WEEK_MS = str(7 * 24 * 3600 * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    started = start_kafka_broker(tmp_path_factory.mktemp("configs"))
    yield started
    started.stop()


@pytest.fixture
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture
def kp_admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def _topic() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def _rest(broker, method: str, path: str, body: object = None) -> tuple[int, object]:
    status, _, answer = http(method, f"{broker.admin_url}/admin/v2/{path}",
                             None if body is None else json.dumps(body).encode())
    return status, json.loads(answer) if answer else None


def _configs(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    (future,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    return future.result(timeout=30)


def _create(admin: AdminClient, topic: str, partitions: int = 1, **configs: str) -> None:
    admin.create_topics([NewTopic(topic, partitions, config=configs)])[topic].result(timeout=30)


def _kafka_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=30)
    return caught.value.args[0]


def test_a_created_topic_keeps_its_configs_as_pulsar_policies(broker, admin) -> None:
    topic = _topic()
    _create(admin, topic, 2, **{"cleanup.policy": "compact", "retention.ms": "3600000",
                                "retention.bytes": str(3 * 1024 * 1024), "max.message.bytes": "200000",
                                "message.timestamp.type": "LogAppendTime", "segment.bytes": str(2 << 20),
                                "min.insync.replicas": "2"})
    configs = _configs(admin, topic)
    assert {name: configs[name].value for name in (
        "cleanup.policy", "retention.ms", "retention.bytes", "max.message.bytes", "message.timestamp.type",
        "segment.bytes", "min.insync.replicas")} == {
        "cleanup.policy": "compact", "retention.ms": "3600000", "retention.bytes": str(3 * 1024 * 1024),
        "max.message.bytes": "200000", "message.timestamp.type": "LogAppendTime", "segment.bytes": str(2 << 20),
        "min.insync.replicas": "2"}
    assert all(configs[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value for name in (
        "cleanup.policy", "retention.ms", "max.message.bytes", "message.timestamp.type"))
    assert configs["delete.retention.ms"].value == "86400000" and configs["delete.retention.ms"].is_default
    # what Pulsar's admin API (and `magnetar admin topics get-...`) reads of the same topic
    path = f"persistent/{NAMESPACE}/{topic}"
    assert _rest(broker, "GET", f"{path}/retention") == (200, {"retentionTimeInMinutes": 60, "retentionSizeInMB": 3})
    assert _rest(broker, "GET", f"{path}/compactionThreshold") == (200, 2 << 20)
    assert _rest(broker, "GET", f"{path}/maxMessageSize") == (200, 200000)


def test_kafka_pythons_create_topics_with_configs(broker, admin, kp_admin) -> None:
    topic = _topic()
    kp_admin.create_topics([KpNewTopic(topic, 3, 1, topic_configs={"cleanup.policy": "compact,delete",
                                                                 "retention.bytes": "1000"})])
    configs = _configs(admin, topic)
    # Pulsar keeps whole megabytes: 1000 bytes is kept as 1 MB, and reported as what is applied
    assert (configs["cleanup.policy"].value, configs["retention.bytes"].value, configs["retention.ms"].value) == (
        "compact,delete", str(1 << 20), WEEK_MS)
    assert _rest(broker, "GET", f"persistent/{NAMESPACE}/{topic}/compactionThreshold") == (200, 1 << 30)


def test_a_topic_nobody_configured_reports_kafkas_defaults_and_its_sources(broker, admin) -> None:
    topic = _topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap})  # auto-created by its Metadata request
    producer.produce(topic, b"x")
    assert producer.flush(30) == 0
    configs = _configs(admin, topic)
    assert (configs["retention.ms"].value, configs["retention.bytes"].value) == (WEEK_MS, "-1")
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == (
        "delete", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["message.timestamp.type"].value == "CreateTime" and configs["message.timestamp.type"].is_default
    assert (configs["max.message.bytes"].value, configs["max.message.bytes"].source) == (
        str(5 * 1024 * 1024), ConfigSource.STATIC_BROKER_CONFIG.value)
    assert _rest(broker, "GET", f"persistent/{NAMESPACE}/{topic}/retention") == (
        200, {"retentionTimeInMinutes": 10080, "retentionSizeInMB": -1})


def test_pulsar_policies_set_over_the_admin_api_are_what_kafka_clients_see(broker, admin) -> None:
    namespace = f"public/ns-{uuid.uuid4().hex[:6]}"
    assert _rest(broker, "PUT", f"namespaces/{namespace}")[0] in (200, 204)
    assert _rest(broker, "POST", f"namespaces/{namespace}/retention",
                 {"retentionTimeInMinutes": 30, "retentionSizeInMB": 10})[0] in (200, 204)
    topic = _topic()
    assert _rest(broker, "PUT", f"persistent/{namespace}/{topic}/partitions", 1)[0] in (200, 204)
    kafka = AdminClient({"bootstrap.servers": broker.bootstrap})
    # a client of the default namespace does not see it; the namespace's policy is read through its topic
    assert topic not in kafka.list_topics(timeout=10).topics
    default_topic = _topic()
    _create(admin, default_topic)
    assert _rest(broker, "POST", f"persistent/{NAMESPACE}/{default_topic}/retention",
                 {"retentionTimeInMinutes": 2, "retentionSizeInMB": -1})[0] in (200, 204)
    assert _rest(broker, "POST", f"persistent/{NAMESPACE}/{default_topic}/compactionThreshold", 5000)[0] in (
        200, 204)
    configs = _configs(admin, default_topic)
    assert (configs["retention.ms"].value, configs["retention.bytes"].value) == ("120000", "-1")
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == (
        "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


def test_bad_configs_are_refused_with_invalid_config_and_create_nothing(broker, admin) -> None:
    for configs, words in [({"no.such.key": "1"}, "Unknown topic config name: no.such.key"),
                           ({"retention.ms": "soon"}, "retention.ms"),
                           ({"cleanup.policy": "compact,shred"}, "cleanup.policy"),
                           ({"segment.bytes": "1024"}, "at least 1048576"),
                           ({"max.message.bytes": str(64 << 20)}, "over the broker's maxMessageSize"),
                           ({"retention.ms": "0"}, "Setting a single time or size limit to 0 is invalid")]:
        topic = _topic()
        error = _kafka_error(admin.create_topics([NewTopic(topic, 1, config=configs)])[topic])
        assert error.code() == KafkaError.INVALID_CONFIG and words in error.str(), (configs, error)
        assert topic not in admin.list_topics(timeout=10).topics


def test_incremental_and_full_alters_change_what_they_name(broker, admin, kp_admin) -> None:
    topic = _topic()
    _create(admin, topic, **{"retention.ms": "600000", "min.insync.replicas": "2"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.bytes", str(8 << 20), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("min.insync.replicas", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    configs = _configs(admin, topic)
    assert (configs["cleanup.policy"].value, configs["retention.ms"].value, configs["retention.bytes"].value,
            configs["min.insync.replicas"].value) == ("delete,compact", "600000", str(8 << 20), "1")
    assert configs["min.insync.replicas"].is_default
    # kafka-python's AlterConfigs (not incremental): it sends the topic's other modified keys along,
    # as AlterConfigs puts every key it does not name back to its default
    results = kp_admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                       configs={"retention.ms": "-1"})], incremental=False)
    assert results  # no error raised
    configs = _configs(admin, topic)
    assert (configs["cleanup.policy"].value, configs["retention.ms"].value, configs["retention.bytes"].value) == (
        "delete,compact", "-1", str(8 << 20))
    assert _rest(broker, "GET", f"persistent/{NAMESPACE}/{topic}/retention") == (
        200, {"retentionTimeInMinutes": -1, "retentionSizeInMB": 8})
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)])
    assert _kafka_error(admin.incremental_alter_configs([bad])[bad]).code() == KafkaError.INVALID_CONFIG
    described = kp_admin.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, topic)])
    assert "retention.ms" in json.dumps(described, default=str)


def test_create_partitions_grows_the_partitioned_topic(broker, admin, kp_admin) -> None:
    topic = _topic()
    _create(admin, topic, 2)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=30)
    kp_admin.create_partitions({topic: 5})
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5
    assert _rest(broker, "GET", f"persistent/{NAMESPACE}/{topic}/partitions") == (200, {"partitions": 5})
    assert _kafka_error(admin.create_partitions([NewPartitions(topic, 4)])[topic]).code() == \
        KafkaError.INVALID_PARTITIONS
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    reports: list = []
    producer.produce(topic, b"on the new partition", partition=4, on_delivery=lambda e, m: reports.append(e or m))
    assert producer.flush(30) == 0 and reports[0].partition() == 4


def test_delete_records_moves_the_partitions_start(broker, admin, kp_admin) -> None:
    topic = _topic()
    _create(admin, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    for i in range(60):
        producer.produce(topic, str(i).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    (future,) = admin.delete_records([TopicPartition(topic, 0, 12)]).values()
    assert future.result(timeout=30).low_watermark == 12
    deleted = kp_admin.delete_records({KpTopicPartition(topic, 1): -1})  # -1: up to the high watermark
    assert [meta["low_watermark"] if isinstance(meta, dict) else meta.low_watermark
            for meta in deleted.values()] == [30]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (12, 30)
        consumer.subscribe([topic])
        got: list = []
        assert wait_for(lambda: got.extend(m for m in consumer.consume(10, 0.2) if not m.error()) or len(got) >= 18,
                        timeout=30)
        assert sorted((m.partition(), m.offset()) for m in got) == [(0, offset) for offset in range(12, 30)]
    finally:
        consumer.close()
    refused = admin.delete_records([TopicPartition(topic, 0, 999)])
    assert _kafka_error(next(iter(refused.values()))).code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_cluster_groups_and_their_offsets_as_admin_clients_list_them(broker, admin, kp_admin) -> None:
    topic, group = _topic(), f"grp-{uuid.uuid4().hex[:6]}"
    _create(admin, topic, 3)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(30):
        producer.send(topic, str(i).encode(), partition=i % 3)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=20_000)
    try:
        read = [next(consumer) for _ in range(30)]
        consumer.commit()
        assert len(read) == 30
        cluster = admin.describe_cluster().result(timeout=30)
        assert (cluster.cluster_id, [node.id for node in cluster.nodes], cluster.controller.id) == ("magnetar", [0], 0)
        assert kp_admin.describe_cluster()["cluster_id"] == "magnetar"
        listed = admin.list_consumer_groups().result(timeout=30)
        assert group in [g.group_id for g in listed.valid]
        (described,) = admin.describe_consumer_groups([group]).values()
        assert len(described.result(timeout=30).members) == 1
        assert {"group_id": group, "protocol_type": "consumer", "group_state": "Stable"} in kp_admin.list_groups()
        offsets = kp_admin.list_group_offsets({group: None})[group]
        assert {(tp.partition, meta.offset) for tp, meta in offsets.items()} == {(0, 10), (1, 10), (2, 10)}
    finally:
        consumer.close()


def test_max_message_bytes_holds_kafka_and_pulsar_producers_alike(broker, admin) -> None:
    topic = _topic()
    _create(admin, topic, **{"max.message.bytes": "20000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "none",
                         "message.max.bytes": 1_000_000})
    reports: list = []
    for size in (5_000, 50_000):
        producer.produce(topic, random.randbytes(size), on_delivery=lambda e, m: reports.append(e and e.code()))
        producer.flush(30)
    assert reports == [None, KafkaError.MSG_SIZE_TOO_LARGE]
    # Pulsar producers meet the topic's maxMessageSize policy too: the broker refuses the send
    # with NotAllowedError, as Pulsar's brokers do, and magnetar.client fails that send alone,
    # as the Java client does (the official client's C++ core keeps retrying it instead)
    with MagnetarClient(broker.url) as magnetar_client:
        producer_ = magnetar_client.create_producer(f"persistent://{NAMESPACE}/{topic}", batching_enabled=False,
                                                    send_timeout_millis=2000)
        producer_.send(b"small")
        with pytest.raises(Exception, match="NotAllowed"):
            producer_.send(random.randbytes(50_000))
        producer_.send(b"small again")
    assert sorted(len(m.value()) for m in _read(broker, topic, 3)) == [5, 11, 5_000]
    # Pulsar's rule on the admin API: a topic's maxMessageSize is at most the broker's
    status, answer = _rest(broker, "POST", f"persistent/{NAMESPACE}/{topic}/maxMessageSize", 64 << 20)
    assert status == 412 and "over the broker's maxMessageSize (5242880)" in answer["reason"]
    assert _rest(broker, "DELETE", f"persistent/{NAMESPACE}/{topic}/maxMessageSize")[0] in (200, 204)
    assert _configs(admin, topic)["max.message.bytes"].value == str(5 << 20)


def _read(broker, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list = []
    try:
        assert wait_for(lambda: got.extend(m for m in consumer.consume(10, 0.2) if not m.error())
                        or len(got) >= count, timeout=30), got
    finally:
        consumer.close()
    return got
