"""KoP's configuration keys: a broker that cannot serve Kafka as configured says which key to fix."""

from __future__ import annotations

import socket

import pytest
from admin_http import get_json
from kafka_brokers import KafkaStandalone
from standalone import run_standalone

from magnetar.broker.config.loading import load_configuration


@pytest.mark.parametrize(("args", "message"), [
    (["-c", "messagingProtocols=nope"], "messagingProtocols: no protocol handler 'nope' (installed: kafka"),
    (["-c", "messagingProtocols=kafka"], "kafkaListeners is empty"),
    (["-c", "messagingProtocols=kafka", "-c", "kafkaListeners=SASL_SCRAM://127.0.0.1:9093"],
     "kafkaListeners: 'SASL_SCRAM://127.0.0.1:9093' is not"),
    (["-c", "messagingProtocols=kafka", "-c", "kafkaListeners=SSL://127.0.0.1:0"],
     "needs tlsCertificateFilePath and tlsKeyFilePath"),
    (["-c", "messagingProtocols=kafka", "-c", "kafkaListeners=SASL_PLAINTEXT://127.0.0.1:0"],
     "SASL_PLAINTEXT checks passwords with the broker's authentication providers"),
    (["--kafka", "0", "-c", "brokerEntryMetadataInterceptors="], "add AppendIndexMetadataInterceptor to "
                                                                  "brokerEntryMetadataInterceptors"),
    (["-c", "entryFormat=avro"], "entryFormat must be 'pulsar' or 'kafka'"),
    (["--kafka", "0", "-c", "authenticationEnabled=true", "-c", "authenticationProviders=token", "-c",
      "tokenSecretKey=data:;base64,c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA=="],
     "a PLAINTEXT listener would let Kafka clients past authenticationEnabled/authorizationEnabled"),
])
def test_a_kafka_setting_the_broker_cannot_serve_is_named(args, message, tmp_path) -> None:
    done = run_standalone("--data-dir", str(tmp_path / "data"), *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_a_kop_brokers_conf_loads_with_its_keys_kept_or_ignored(tmp_path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("messagingProtocols=kafka\nprotocolHandlerDirectory=./protocols\n"
                    "kafkaListeners=PLAINTEXT://127.0.0.1:9092\nkafkaTenant=kafka\nentryFormat=kafka\n"
                    "kopSslProtocol=TLS\ngroupInitialRebalanceDelayMs=0\nkafkaTypo=1\n")
    loaded = load_configuration(conf, [])
    config = loaded.config
    assert (config.messagingProtocols, config.kafkaListeners, config.kafkaTenant, config.kafkaNamespace,
            config.entryFormat) == (["kafka"], "PLAINTEXT://127.0.0.1:9092", "kafka", "default", "kafka")
    assert {"protocolHandlerDirectory", "kopSslProtocol", "groupInitialRebalanceDelayMs"} <= set(loaded.ignored)
    assert [setting.key for setting in loaded.unknown] == ["kafkaTypo"]


def test_the_runtime_configuration_shows_the_kafka_ports_bound(tmp_path) -> None:
    """Listeners asked on port 0 are shown as bound, as the Pulsar ports are: the address a
    Kafka client reaches, not `:0`."""
    broker = KafkaStandalone(tmp_path / "data", ["messagingProtocols=kafka",
                                                 "kafkaListeners=PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"]).start()
    try:
        runtime = get_json(f"{broker.admin_url}/admin/v2/brokers/configuration/runtime")
        assert isinstance(runtime, dict)
        listeners = runtime["kafkaListeners"].split(",")
        ports = [int(listener.rsplit(":", 1)[1]) for listener in listeners]
        assert len(listeners) == 2 and all(listener.startswith("PLAINTEXT://127.0.0.1:") for listener in listeners)
        assert 0 not in ports and len(set(ports)) == 2
        for port in ports:  # each a Kafka listener that answers
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
    finally:
        broker.stop()
