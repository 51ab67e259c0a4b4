"""Secrets never leave the admin API: the runtime configuration and a cluster's data show
them masked, wherever they are set (a file, the command line, a cluster update); and the
runtime configuration shows the ports the broker bound, not the 0 it was asked."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from admin_http import get_json, http

SIGNING_KEY = b"signing-key-nobody-may-read-0123456789abcdef"
BROKER_CLIENT_TOKEN = "broker-client-token-secret-5150"
CLUSTER_SECRETS = {
    "authenticationParameters": "token:cluster-auth-secret-8675309",
    "brokerClientTlsTrustStorePassword": "truststore-password-secret-42",
    "brokerClientTlsKeyStorePassword": "keystore-password-secret-43",
    "brokerClientSslFactoryPluginParams": "ssl-factory-params-secret-44",
}


def _leaks(answer: bytes) -> list[str]:
    secrets = [SIGNING_KEY.decode(), base64.b64encode(SIGNING_KEY).decode(), BROKER_CLIENT_TOKEN,
               *(value.removeprefix("token:") for value in CLUSTER_SECRETS.values())]
    return [secret for secret in secrets if secret in answer.decode()]


def _call(broker, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    status, _, answer = http(method, f"{broker.admin_url}{path}", json.dumps(body).encode() if body else None)
    return status, answer


def test_runtime_configuration_masks_secrets_and_shows_bound_ports(broker_factory):
    broker = broker_factory(f"tokenSecretKey=data:;base64,{base64.b64encode(SIGNING_KEY).decode()}",
                            "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
                            f"brokerClientAuthenticationParameters=token:{BROKER_CLIENT_TOKEN}",
                            "topicCompactionRetainNullKey=true")
    status, answer = _call(broker, "GET", "/admin/v2/brokers/configuration/runtime")
    assert status == 200 and _leaks(answer) == []
    runtime = json.loads(answer)
    assert runtime["tokenSecretKey"] == runtime["brokerClientAuthenticationParameters"] == "****"
    # set, but neither secret nor empty: shown as they are
    assert runtime["topicCompactionRetainNullKey"] == "true" and runtime["tokenPublicAlg"] == "RS256"
    assert runtime["tokenPublicKey"] == ""
    assert runtime["brokerServicePort"] == str(broker.port) != "0"
    assert runtime["webServicePort"] == broker.admin_url.rsplit(":", 1)[1] != "0"
    assert runtime["brokerServicePortTls"] == runtime["webServicePortTls"] == ""

    cli = subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url,
                          "brokers", "get-runtime-config"], capture_output=True, timeout=60, check=False)
    assert cli.returncode == 0 and b"brokerServicePort" in cli.stdout and _leaks(cli.stdout) == []


def test_cluster_data_masks_credentials_and_keeps_them_on_a_round_trip(broker):
    remote = {"serviceUrl": "http://127.0.0.1:1", "brokerServiceUrl": "pulsar://127.0.0.1:1",
              "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken", **CLUSTER_SECRETS}
    assert _call(broker, "PUT", "/admin/v2/clusters/elsewhere", remote)[0] == 204
    assert _call(broker, "POST", "/admin/v2/clusters/standalone", {**CLUSTER_SECRETS, "listenerName": ""})[0] == 204
    for cluster in ("elsewhere", "standalone"):
        status, answer = _call(broker, "GET", f"/admin/v2/clusters/{cluster}")
        assert status == 200 and _leaks(answer) == [], cluster
        data = json.loads(answer)
        assert {name: data[name] for name in CLUSTER_SECRETS} == dict.fromkeys(CLUSTER_SECRETS, "****")
        assert data["authenticationPlugin" if cluster == "elsewhere" else "listenerName"] is not None

    # what an admin read, changed and wrote back keeps the credentials it could not see
    changed = {"serviceUrl": "http://127.0.0.1:2", "brokerClientTlsTrustStorePassword": "a-new-one"}
    shown = get_json(f"{broker.admin_url}/admin/v2/clusters/elsewhere")
    assert _call(broker, "POST", "/admin/v2/clusters/elsewhere", {**shown, **changed})[0] == 204
    broker.stop()
    assert _stored_cluster(broker.data_dir, "elsewhere") == {**remote, **changed}


def _stored_cluster(data_dir: Path, cluster: str) -> dict:
    """The cluster's data in the stopped broker's metadata store, secrets and all."""
    with closing(sqlite3.connect(f"{(data_dir / 'metadata.db').as_uri()}?mode=ro", uri=True)) as db:
        (value,) = db.execute("SELECT value FROM kv WHERE key = ?", (f"/admin/clusters/{cluster}",)).fetchone()
    return json.loads(value)
