"""Encrypted topics in the Spark source: decryptionKeyFile decrypts (from a data directory and
over service.url, what either client sealed); without a key that opens an entry the query fails
naming it and the options, unless cryptoFailureAction says discard or consume."""

from __future__ import annotations

import pulsar
import pytest
from crypto_keys import ec_pair, rsa_pair
from spark_helpers import INTERCEPTORS
from standalone import Standalone

import magnetar.client

pytestmark = pytest.mark.spark

EXPOSING = "exposingBrokerEntryMetadataToClientEnabled=true"


@pytest.fixture(scope="module")
def sealed(tmp_path_factory):
    """`official-rsa`: the official client's LZ4 batches under an RSA key; `ours-ec`: ours,
    unbatched, under an EC key; each with plain messages between the sealed ones."""
    directory = tmp_path_factory.mktemp("encrypted")
    keys = {"rsa": rsa_pair(directory, "rsa"), "ec": ec_pair(directory, "ec"), "other": rsa_pair(directory, "other")}
    broker = Standalone(directory / "data", [INTERCEPTORS, EXPOSING]).start()
    official = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    ours = magnetar.client.Client(broker.url)
    try:
        expected = {}
        for topic, client, pair, batched in (("official-rsa", official, keys["rsa"], True),
                                             ("ours-ec", ours, keys["ec"], False)):
            module = pulsar if client is official else magnetar.client
            sealing = client.create_producer(
                topic, encryption_key="k", batching_enabled=batched, compression_type=module.CompressionType.LZ4,
                crypto_key_reader=module.CryptoKeyReader(str(pair.public), str(pair.private)))
            plain = client.create_producer(topic, batching_enabled=False)
            rows = []
            for i in range(12):
                producer = plain if i % 4 == 3 else sealing
                value = f"{topic} {i}".encode() * (i + 1)
                producer.send(value, partition_key=f"key-{i % 3}", properties={"i": str(i)})
                rows.append((f"key-{i % 3}", {"i": str(i)}, value, producer is plain))
            expected[topic] = rows
        yield broker, directory / "data", keys, expected
    finally:
        official.close()
        ours.close()
        broker.stop()


def _read(spark, broker, data_dir, topic, via: str, **options):
    reader = spark.read.format("magnetar").option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    frame = reader.option("service.url", broker.url).load() if via == "protocol" else reader.load(str(data_dir))
    return frame.orderBy("ledger_id", "entry_id", "batch_index").collect()


@pytest.mark.parametrize("via", ["path", "protocol"])
@pytest.mark.parametrize(("topic", "key"), [("official-rsa", "rsa"), ("ours-ec", "ec")])
def test_the_private_key_decrypts(spark, sealed, via, topic, key):
    broker, data_dir, keys, expected = sealed
    rows = _read(spark, broker, data_dir, topic, via, decryptionKeyFile=str(keys[key].private))
    assert [(r.key, dict(r.properties), bytes(r.value)) for r in rows] == [e[:3] for e in expected[topic]]


def test_without_a_key_that_opens_it_the_query_fails(spark, sealed):
    broker, data_dir, keys, _ = sealed
    with pytest.raises(Exception, match=r"official-rsa: entry \d+:\d+ is encrypted and no private key was given.*"
                                        r"decryptionKeyFile"):
        _read(spark, broker, data_dir, "official-rsa", "path")
    with pytest.raises(Exception, match="the private key given does not open it"):
        _read(spark, broker, data_dir, "ours-ec", "protocol", decryptionKeyFile=str(keys["other"].private))


def test_discard_and_consume(spark, sealed):
    broker, data_dir, keys, expected = sealed
    rows = _read(spark, broker, data_dir, "ours-ec", "path", cryptoFailureAction="discard")
    assert [bytes(r.value) for r in rows] == [e[2] for e in expected["ours-ec"] if e[3]]
    rows = _read(spark, broker, data_dir, "official-rsa", "protocol", cryptoFailureAction="CONSUME",
                 decryptionKeyFile=str(keys["other"].private))
    values = [bytes(r.value) for r in rows]
    assert len(rows) == 12 and all(r.batch_index == -1 for r in rows)  # a sealed batch: one row, as stored
    for row, (_, _, value, is_plain) in zip(rows, expected["official-rsa"], strict=True):
        assert (bytes(row.value) == value) is is_plain
        assert is_plain or len(bytes(row.value)) > 16  # ciphertext and tag, not the plaintext
    assert len(set(values)) == 12


def test_option_mistakes_are_named(spark, sealed, tmp_path):
    broker, data_dir, _, _ = sealed
    (tmp_path / "junk.pem").write_bytes(b"not a key")
    for options, words in (({"decryptionKeyFile": str(tmp_path / "junk.pem")}, "not an unencrypted PEM private key"),
                           ({"decryptionKeyFile": str(tmp_path / "none.pem")}, "cannot read"),
                           ({"cryptoFailureAction": "ignore"}, "must be fail, discard or consume")):
        with pytest.raises(Exception, match=words):
            _read(spark, broker, data_dir, "ours-ec", "path", **options)
