"""Batch reads from a live broker's data dir: rows equal what the official client produced."""

from __future__ import annotations

import logging
import pickle
import re
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from spark_helpers import INTERCEPTORS, check_reads_while_writing, codec_topics, millis, produce
from standalone import NO_ENTRY_METADATA, Standalone

import magnetar.client
from magnetar.broker.transactions.buffer import TransactionBuffer
from magnetar.spark.options import MagnetarOptionError, parse_options
from magnetar.spark.storage_reader import StorageTopics, transactions_of
from magnetar.spark.write_options import parse_write_options

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """One broker with the PIP-70 interceptors; a topic per (batched, compression)."""
    data_dir = tmp_path_factory.mktemp("read") / "data"
    with codec_topics(data_dir, [INTERCEPTORS], "t") as (broker, topics, client):
        yield broker, data_dir, topics, client


def test_rows_equal_what_the_official_client_sent(spark, produced):
    _, data_dir, topics, _ = produced
    df = (
        spark.read.format("magnetar")
        .option("topicsPattern", "persistent://public/default/t-[bn]-.*")
        .load(str(data_dir))
    )
    rows = df.collect()
    assert len(rows) == sum(len(v) for v in topics.values())
    by_topic: dict[str, list] = {}
    for row in rows:
        by_topic.setdefault(row["topic"].rsplit("/", 1)[1], []).append(row)
    for topic, sent in topics.items():
        got = by_topic[topic]
        assert len(got) == len(sent), topic
        indexes = sorted(r["index"] for r in got)
        assert indexes == list(range(indexes[0], indexes[0] + len(got))), topic  # continuous
        for row in got:
            batch_index = row["batch_index"]
            i, value, kwargs = sent[(row["ledger_id"], row["entry_id"], batch_index)]
            assert bytes(row["value"]) == value
            assert row["properties"] == {"i": str(i)}
            assert row["key"] == kwargs.get("partition_key")
            assert millis(row["event_time"]) == kwargs.get("event_timestamp")
            assert row["partition"] == -1
            assert row["broker_time"] is not None and millis(row["publish_time"]) > 0
            assert row["producer_name"]
            assert (batch_index >= 0) == topic.startswith("t-b-")


def test_topic_written_while_read_sees_durable_prefix(spark, produced):
    _, data_dir, _, client = produced

    def read_indexes():
        df = spark.read.format("magnetar").option("topic", "live").load(str(data_dir))
        return [r["index"] for r in df.select("index").collect()]

    check_reads_while_writing(client, "live", read_indexes)


def test_partitioned_topic_and_partition_pruning(spark, produced):
    broker, data_dir, _, client = produced
    producer = None
    try:
        req = urllib.request.Request(
            f"http://127.0.0.1:{_http_port(broker)}/admin/v2/persistent/public/default/parts/partitions",
            data=b"3",
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=10).read()
        producer = client.create_producer(
            "parts", batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
        )
        for i in range(30):
            producer.send(str(i).encode())
    finally:
        if producer is not None:
            producer.close()
    df = spark.read.format("magnetar").option("topic", "parts").load(str(data_dir))
    assert sorted(int(bytes(r["value"])) for r in df.collect()) == list(range(30))
    assert {r["partition"] for r in df.select("partition").distinct().collect()} == {0, 1, 2}
    only = df.where("partition = 1")
    assert only.count() == df.where("partition = 1").count() == sum(1 for r in df.collect() if r["partition"] == 1)


def _http_port(broker) -> int:
    match = re.search(r"admin API on http://[\d.]+:(\d+)", broker.log())
    assert match, broker.log()
    return int(match.group(1))


def test_entries_without_prefix_read_with_null_index(spark, broker_factory, client_factory, tmp_path):
    broker = broker_factory(*NO_ENTRY_METADATA)
    client = client_factory(broker.url)
    sent = produce(client, "plain", 20, batched=True, compression=pulsar.CompressionType.LZ4)
    broker.stop()
    df = spark.read.format("magnetar").option("topic", "plain").load(str(broker.data_dir))
    rows = df.collect()
    assert len(rows) == len(sent)
    assert all(r["index"] is None and r["broker_time"] is None for r in rows)
    assert df.where("broker_time > timestamp_millis(0)").count() == 0
    late = spark.read.format("magnetar").option("topic", "plain").option("startingTime", str(10**15))
    assert late.load(str(broker.data_dir)).count() == 0  # time options fall back to publish_time


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "nope"}, "unknown topic"),
        ({"topic": "t-b-none", "startingTime": "yesterday"}, "option 'startingTime'"),
        ({"topic": "t-b-none", "service.url": "pulsar://127.0.0.1:6650"}, "not both"),
        ({"topic": "t-b-none", "startingOffsets": "{bad"}, "option 'startingOffsets'"),
        ({"topic": "t-b-none", "colour": "red"}, "unknown option"),
        ({"topic": "t-b-none", "topics": "a,b"}, "exactly one"),
    ],
)
def test_bad_options_fail_at_load(spark, produced, options, message):
    _, data_dir, _, _ = produced
    reader = spark.read.format("magnetar")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load(str(data_dir))


@pytest.mark.parametrize(("options", "says"), [
    # Spark hands options over lower-cased: the refusal names the documented spelling
    ({"startingoffset": "earliest"}, "unknown option(s) startingoffset (did you mean startingOffsets?); known: "),
    ({"topicspatern": "x"}, "topicspatern (did you mean topicsPattern?)"),
    ({"splitsizebyte": "1"}, "splitsizebyte (did you mean splitSizeBytes?)"),
    ({"decryptionkeyfiles": "k.pem"}, "decryptionkeyfiles (did you mean decryptionKeyFile?)"),
    ({"splitsizebytes": "lots"}, "option 'splitSizeBytes' must be an integer"),
])
def test_a_misspelt_option_is_named_with_the_nearest_documented_one(options, says):
    with pytest.raises(MagnetarOptionError) as info:
        parse_options({"path": "/x", "topic": "t", **options}, streaming=False)
    assert says in str(info.value)
    if "known: " in str(info.value):  # as documented, not lower-cased
        assert "startingOffsets, " in str(info.value).split("known: ", 1)[1]


def test_a_misspelt_write_option_is_named_with_the_nearest_documented_one():
    with pytest.raises(MagnetarOptionError, match=r"batchingmaxmessage \(did you mean batchingMaxMessages\?\)"):
        parse_write_options({"service.url": "pulsar://127.0.0.1:6650", "batchingmaxmessage": "5"}, None)


def test_max_messages_per_trigger_is_for_streams():
    with pytest.raises(MagnetarOptionError, match="streams"):
        parse_options({"path": "/x", "topic": "t", "maxMessagesPerTrigger": "5"}, streaming=False)
    with pytest.raises(MagnetarOptionError, match="no end"):
        parse_options({"path": "/x", "topic": "t", "endingOffsets": "latest"}, streaming=True)


def test_security_options_are_read_as_the_pulsar_spark_connector_names_them(tmp_path):
    token_file = tmp_path / "token.txt"
    token_file.write_text("abc.def.ghi\n")
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    options = parse_options({"service.url": "pulsar+ssl://h:6651", "topic": "t",
                             "pulsar.client.authPluginClassName": plugin,
                             "pulsar.client.authParams": f"file://{token_file}",
                             "pulsar.client.tlsTrustCertsFilePath": "/ca.pem",
                             "pulsar.client.tlsHostnameVerificationEnable": "true"})
    security = options.security
    assert security.authentication.auth_data() == b"abc.def.ghi"
    assert (security.tls_trust_certs_file_path, security.tls_validate_hostname) == ("/ca.pem", True)
    pickle.loads(pickle.dumps(options))  # shipped to executors
    with pytest.raises(MagnetarOptionError, match="authPluginClassName"):
        parse_options({"service.url": "pulsar://h:1", "topic": "t", "pulsar.client.authPluginClassName": "Kerberos"})
    with pytest.raises(MagnetarOptionError, match=r"(?i)tlsAllowInsecureConnection"):
        parse_options({"service.url": "pulsar://h:1", "topic": "t",
                       "pulsar.client.tlsAllowInsecureConnection": "maybe"})


# -- transactions (PIP-31): rows of committed messages only, and never a row of an open
# transaction or anything behind it; a stream's latest offset stops at the open transaction,
# so the next micro-batch reads its messages once committed.
@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, object, object]]:
    """A topic: a plain message, a committed transaction, an aborted one, a plain message,
    then a transaction left open and a plain message behind it."""
    data_dir = tmp_path_factory.mktemp("spark-txn") / "data"
    broker = Standalone(data_dir, ["transactionCoordinatorEnabled=true"]).start()
    topic = f"persistent://public/default/spark-txn-{uuid.uuid4().hex[:8]}"
    client = magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic)
        producer.send(b"plain-1")
        for value, commit in ((b"committed", True), (b"aborted", False)):
            txn = client.new_transaction(timeout=60)
            producer.send(value, txn=txn)
            txn.commit() if commit else txn.abort()
        producer.send(b"plain-2")
        still_open = client.new_transaction(timeout=60)
        producer.send(b"open", txn=still_open)
        producer.send(b"plain-3")
        yield data_dir, topic, still_open, client
    finally:
        client.close()
        broker.stop()


def _indexed_values(spark, data_dir: Path, topic: str) -> list[tuple[int, bytes]]:
    rows = spark.read.format("magnetar").option("topic", topic).load(str(data_dir)).collect()
    return sorted((row["index"], bytes(row["value"])) for row in rows)


def test_rows_are_committed_messages_only_and_stop_at_an_open_transaction(spark, written) -> None:
    data_dir, topic, still_open, _ = written
    topics = StorageTopics(str(data_dir))
    try:
        (tp,) = topics.partitions(topic)
        held_from = topics.next_index(tp)  # a stream's latest offset
    finally:
        topics.close()
    assert [value for _, value in _indexed_values(spark, data_dir, topic)] == [b"plain-1", b"committed", b"plain-2"]
    still_open.commit()
    rows = _indexed_values(spark, data_dir, topic)
    assert [value for _, value in rows] == [b"plain-1", b"committed", b"plain-2", b"open", b"plain-3"]
    assert held_from == dict((value, index) for index, value in rows)[b"open"]  # it stopped at the open one


def test_a_plan_starts_from_the_brokers_buffer_snapshot(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The driver reads the broker's last transaction-buffer snapshot and only the entries
    after it, and ends with what reading every entry gives: the same aborted transactions,
    the same open one holding the same position."""
    broker = Standalone(tmp_path / "data", ["transactionCoordinatorEnabled=true",
                                            "transactionBufferSnapshotMaxTransactionCount=4"]).start()
    topic = f"persistent://public/default/spark-snap-{uuid.uuid4().hex[:8]}"
    try:
        with magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
            producer = client.create_producer(topic)
            for n in range(10):
                txn = client.new_transaction(timeout=60)
                producer.send(f"t{n}".encode(), txn=txn)
                txn.abort() if n % 3 == 2 else txn.commit()
            client.new_transaction(timeout=60)  # opened, never used: holds nothing
            still_open = client.new_transaction(timeout=60)
            producer.send(b"open", txn=still_open)
            producer.send(b"plain")
            topics = StorageTopics(str(tmp_path / "data"))
            try:
                (tp,) = topics.partitions(topic)
                ml = topics.ledger(tp)
                assert ml is not None
                with caplog.at_level(logging.INFO, logger="magnetar.broker.transactions.buffer"):
                    planned = transactions_of(ml, topics.factory.metadata_store)
                whole = TransactionBuffer.load(ml)  # every entry, no snapshot
            finally:
                topics.close()
            still_open.abort()
    finally:
        broker.stop()
    assert planned is not None
    rebuilt = re.search(r"rebuilt from a snapshot at \S+ and (\d+) entries", caplog.text)
    assert rebuilt is not None, caplog.text
    assert int(rebuilt.group(1)) < 22  # 20 messages and markers, the open one's and the plain one
    assert (planned.aborted, planned.max_read_position) == (whole.aborted, whole.max_read_position)
    assert len(planned.aborted) == 3 and planned.max_read_position is not None
