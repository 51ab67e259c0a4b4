"""Reading over the Pulsar protocol (`service.url`): the same rows as from the data dir."""

from __future__ import annotations

import json
import random
import secrets
import urllib.request

import jwt
import pulsar
import pytest
from certs import CertificateAuthority
from spark_helpers import INTERCEPTORS, check_reads_while_writing, codec_topics, millis, produce

pytestmark = pytest.mark.spark

EXPOSING = "exposingBrokerEntryMetadataToClientEnabled=true"
COLUMNS = [
    "topic",
    "partition",
    "ledger_id",
    "entry_id",
    "batch_index",
    "index",
    "broker_time",
    "publish_time",
    "event_time",
    "key",
    "properties",
    "value",
    "producer_name",
    "sequence_id",
    "deliver_at",
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A broker exposing PIP-70 metadata, a topic per (batched, compression), one bigger topic."""
    data_dir = tmp_path_factory.mktemp("protocol") / "data"
    config = [INTERCEPTORS, EXPOSING, "managedLedgerMaxEntriesPerLedger=40",
              "managedLedgerMinLedgerRolloverTimeMinutes=0"]
    with codec_topics(data_dir, config, "p") as (broker, topics, client):
        produce(client, "big", 3000, batched=True, compression=pulsar.CompressionType.LZ4)
        yield broker, data_dir, topics, client


def _frame(spark, source, **options):
    reader = spark.read.format("magnetar")
    for k, v in options.items():
        reader = reader.option(k, v)
    if source.startswith("pulsar://"):
        return reader.option("service.url", source).load()
    return reader.load(source)


def _rows(df) -> list[tuple]:
    """Rows as comparable tuples (maps as sorted items, binary as bytes)."""
    out = []
    for row in df.select(*COLUMNS).collect():
        values = list(row)
        values[COLUMNS.index("properties")] = tuple(sorted(row["properties"].items()))
        values[COLUMNS.index("value")] = bytes(row["value"])
        out.append(tuple(values))
    return sorted(out, key=lambda r: (r[0], r[1], r[2], r[3], r[4]))


def test_rows_equal_the_data_dir_rows_for_every_codec(spark, served):
    broker, data_dir, topics, _ = served
    pattern = "persistent://public/default/p-[bn]-.*"
    over_protocol = _rows(_frame(spark, broker.url, topicsPattern=pattern))
    from_storage = _rows(_frame(spark, str(data_dir), topicsPattern=pattern))
    assert len(over_protocol) == sum(len(sent) for sent in topics.values())
    assert over_protocol == from_storage
    assert all(r[COLUMNS.index("index")] is not None for r in over_protocol)
    for row in over_protocol:
        sent = topics[row[0].rsplit("/", 1)[1]]
        _, value, _ = sent[(row[2], row[3], row[4])]
        assert row[COLUMNS.index("value")] == value


def test_index_and_time_pushdown_equal_a_full_read_and_filter(spark, served):
    broker, _, _, _ = served
    df = _frame(spark, broker.url, topic="big")
    everything = df.select("index", "broker_time").collect()
    indexes = sorted(r["index"] for r in everything)
    times = sorted(millis(r["broker_time"]) for r in everything)
    assert indexes == list(range(len(everything)))
    rng = random.Random(7)
    for _ in range(6):
        low, high = sorted(rng.sample(indexes, 2))
        condition = f"index >= {low} AND index < {high}"
        got = sorted(r["index"] for r in df.where(condition).select("index").collect())
        assert got == [i for i in indexes if low <= i < high], condition
        t_low, t_high = sorted(rng.sample(times, 2))
        condition = f"broker_time > timestamp_millis({t_low}) AND broker_time <= timestamp_millis({t_high})"
        got = sorted(r["index"] for r in df.where(condition).select("index").collect())
        assert got == sorted(r["index"] for r in everything if t_low < millis(r["broker_time"]) <= t_high), condition


def test_offsets_and_times_match_the_data_dir(spark, served):
    broker, data_dir, _, _ = served
    topic = "persistent://public/default/big"
    cases = [
        {"startingOffsets": f'{{"{topic}": {{"-1": 1234}}}}', "endingOffsets": f'{{"{topic}": {{"-1": 2100}}}}'},
        {"startingOffsets": "latest"},
    ]
    stored = _frame(spark, str(data_dir), topic="big").select("broker_time").collect()
    times = sorted(millis(r["broker_time"]) for r in stored)
    cases.append({"startingTime": str(times[len(times) // 3]), "endingTime": str(times[2 * len(times) // 3])})
    for options in cases:
        over_protocol = _rows(_frame(spark, broker.url, topic="big", **options))
        from_storage = _rows(_frame(spark, str(data_dir), topic="big", **options))
        assert over_protocol == from_storage, options
    assert _frame(spark, broker.url, topic="big", startingOffsets="latest").count() == 0


def test_partitioned_topic_over_the_protocol(spark, served):
    broker, data_dir, _, client = served
    admin = f"{broker.admin_url}/admin/v2/persistent/public/default/parted/partitions"
    request = urllib.request.Request(admin, data=b"3", method="PUT", headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
    producer = client.create_producer(
        "parted", batching_enabled=False, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
    )
    for i in range(30):
        producer.send(str(i).encode())
    producer.close()
    df = _frame(spark, broker.url, topic="parted")
    assert sorted(int(bytes(r["value"])) for r in df.collect()) == list(range(30))
    assert _rows(df) == _rows(_frame(spark, str(data_dir), topic="parted"))
    assert df.where("partition = 2").count() == 10


def test_without_exposed_metadata_index_and_time_read_as_null(spark, broker_factory, client_factory):
    broker = broker_factory(INTERCEPTORS, "exposingBrokerEntryMetadataToClientEnabled=false")
    client = client_factory(broker.url)
    sent = produce(client, "hidden", 25, batched=True, compression=pulsar.CompressionType.ZSTD)
    rows = _frame(spark, broker.url, topic="hidden").collect()
    assert len(rows) == len(sent)
    assert all(r["index"] is None and r["broker_time"] is None for r in rows)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "never-created"}, "unknown topic"),
        ({"topicsPattern": ".*/x"}, "namespace literally"),
        ({"topic": "p-b-none", "service.url": "pulsar://127.0.0.1:1"}, "cannot connect"),
    ],
)
def test_bad_options_fail_at_load(spark, served, options, message):
    broker, _, _, _ = served
    reader = spark.read.format("magnetar").option("service.url", broker.url)
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match=message):
        reader.load()


def test_unknown_topic_is_not_created_by_looking(spark, served):
    broker, _, _, _ = served
    with pytest.raises(Exception, match="unknown topic"):
        _frame(spark, broker.url, topic="ghost")
    with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/persistent/public/default", timeout=10) as answer:
        listed = json.load(answer)
    assert "persistent://public/default/p-b-none" in listed
    assert not [t for t in listed if "ghost" in t]


def test_topic_written_while_read_gives_a_growing_prefix(spark, served):
    broker, _, _, client = served

    def read_indexes():
        return [r["index"] for r in _frame(spark, broker.url, topic="live-p").select("index").collect()]

    check_reads_while_writing(client, "live-p", read_indexes)


def test_reading_over_tls_with_a_token(spark, broker_factory, client_factory, tmp_path):
    """pulsar+ssl:// with the pulsar-spark connector's pulsar.client.* options, driver and executors."""
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("broker", "broker", server=True)
    key = tmp_path / "secret.key"
    key.write_bytes(secrets.token_bytes(32))
    token = jwt.encode({"sub": "admin"}, key.read_bytes(), algorithm="HS256")
    broker = broker_factory(f"tlsCertificateFilePath={pair.cert}", f"tlsKeyFilePath={pair.key}",
                            "brokerServicePortTls=0", "authenticationEnabled=true", "authenticationProviders=token",
                            f"tokenSecretKey=file://{key}", "authorizationEnabled=true", "superUserRoles=admin")
    client = client_factory(broker.tls_url, tls_trust_certs_file_path=str(ca.pem),
                            authentication=pulsar.AuthenticationToken(token))
    sent = produce(client, "secured", 40, batched=True, compression=pulsar.CompressionType.LZ4)
    options = {"service.url": broker.tls_url, "topic": "secured",
               "pulsar.client.tlsTrustCertsFilePath": str(ca.pem),
               "pulsar.client.authPluginClassName": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
               "pulsar.client.authParams": f"token:{token}"}
    reader = spark.read.format("magnetar")
    for name, value in options.items():
        reader = reader.option(name, value)
    assert reader.load().count() == len(sent)
    # Writes take the same options: rows written over pulsar+ssl:// with the token read back.
    values = [f"written-{i}".encode() for i in range(25)]
    writer = spark.createDataFrame([(value,) for value in values], "value binary").write.format("magnetar")
    for name, value in {**options, "topic": "secured-out"}.items():
        writer = writer.option(name, value)
    writer.mode("append").save()
    back = reader.option("topic", "secured-out").load().select("value").collect()
    assert sorted(bytes(row.value) for row in back) == sorted(values)
    with pytest.raises(Exception, match="AuthorizationError"):
        reader.option("pulsar.client.authParams", f"token:{jwt.encode({'sub': 'nobody'}, key.read_bytes())}").load()
