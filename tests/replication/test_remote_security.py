"""Replication to a remote cluster that takes only TLS and tokens: the replicator reaches it
with the cluster's own TLS and credentials (ClusterData) or broker.conf's brokerClient* keys,
and with wrong ones reports why in its stats and retries, losing nothing, until they are put
right."""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jwt
import pulsar
import pytest
from certs import CertificateAuthority
from passlib.apache import HtpasswdFile
from passlib.hash import apr_md5_crypt
from polling import wait_for
from standalone import Standalone

from magnetar.admin_client import AdminClient
from magnetar.broker.config import ServiceConfiguration
from magnetar.client import AuthenticationToken
from magnetar.replication.remote_security import RemoteSettingsError, remote_endpoint

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
BASIC_PASSWORD = "replicator-pw"


@dataclass
class Remote:
    broker: Standalone
    ca: CertificateAuthority
    rogue: CertificateAuthority
    key: bytes
    key_file: Path

    def token(self, role: str, key: bytes | None = None) -> str:
        return jwt.encode({"sub": role}, key or self.key, algorithm="HS256")

    def cluster_data(self, **overrides: object) -> dict:
        """How east reaches this remote: TLS URLs only, so a replicator not using TLS finds no URL."""
        return {"brokerServiceUrlTls": self.broker.tls_url, "serviceUrlTls": self.broker.admin_tls_url,
                "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": str(self.ca.pem),
                "authenticationPlugin": TOKEN_PLUGIN,
                "authenticationParameters": f"token:{self.token('replicator')}", **overrides}

    def admin(self) -> AdminClient:
        return AdminClient(self.broker.admin_url, authentication=AuthenticationToken(self.token("admin")))


@pytest.fixture(scope="module")
def west(tmp_path_factory) -> Iterator[Remote]:
    """Authentication (tokens, client certificates, basic) and authorization on every port;
    `replicator` and `admin` are super users."""
    directory = tmp_path_factory.mktemp("west")
    ca, rogue = CertificateAuthority(directory), CertificateAuthority(directory, "rogue-ca")
    pair = ca.issue("west", "west", server=True)
    key = secrets.token_bytes(32)
    (directory / "secret.key").write_bytes(key)
    htpasswd = HtpasswdFile(str(directory / "htpasswd"), new=True)
    htpasswd.set_hash("replicator", apr_md5_crypt.hash(BASIC_PASSWORD))
    htpasswd.save()
    broker = Standalone(directory / "data", [
        "clusterName=west", f"tlsCertificateFilePath={pair.cert}", f"tlsKeyFilePath={pair.key}",
        f"tlsTrustCertsFilePath={ca.pem}", "brokerServicePortTls=0", "webServicePortTls=0",
        "authenticationEnabled=true", f"authenticationProviders={TOKEN_PROVIDER},tls,basic",
        f"tokenSecretKey=file://{directory / 'secret.key'}", f"basicAuthConf={directory / 'htpasswd'}",
        "authorizationEnabled=true", "superUserRoles=admin,replicator",
    ]).start()
    yield Remote(broker, ca, rogue, key, directory / "secret.key")
    broker.stop()


def replicate_to_west(east: Standalone, west: Remote, data: dict | None) -> AdminClient:
    """East knows west (`data`: its ClusterData, None: its TLS URLs alone) and replicates public/default there."""
    west_admin = west.admin()
    east_data = {"serviceUrl": east.admin_url, "brokerServiceUrl": east.url}
    if "east" in west_admin.clusters():  # this module's west outlives each test's east
        west_admin.update_cluster("east", east_data)
    else:
        west_admin.create_cluster("east", east_data)
    admin = AdminClient(east.admin_url)
    admin.create_cluster("west", data if data is not None else {
        "brokerServiceUrlTls": west.broker.tls_url, "serviceUrlTls": west.broker.admin_tls_url})
    for each in (admin, west_admin):  # west takes replication only from clusters it lists
        each.update_tenant("public", [], ["east", "west"])
        each.set_replication_clusters("public/default", ["east", "west"])
    return admin


def receive_all(consumer, expected: int) -> list[bytes]:
    got = []
    while len(got) < expected:
        message = consumer.receive(timeout_millis=30_000)
        consumer.acknowledge(message)
        got.append(message.data())
    return got


@pytest.mark.parametrize("where", ["cluster", "broker.conf"])
def test_replication_over_tls_with_a_token(broker_factory, west, api, where):
    """The cluster's brokerClientTlsEnabled, trusted CA and token plugin; or, for a cluster
    stating only its TLS URLs, broker.conf's brokerClient* keys (the token taken because east
    has authenticationEnabled, as in Pulsar). The partitioned topic is created on west through
    its https admin API with the same credentials."""
    module, make = api
    config = ["clusterName=east"]
    if where == "broker.conf":
        token = west.token("replicator")
        config += ["brokerClientTlsEnabled=true", f"brokerClientTrustCertsFilePath={west.ca.pem}",
                   f"brokerClientAuthenticationPlugin={TOKEN_PLUGIN}",
                   f"brokerClientAuthenticationParameters=token:{token}",
                   "authenticationEnabled=true", f"authenticationProviders={TOKEN_PROVIDER}",
                   f"tokenSecretKey=file://{west.key_file}",
                   "anonymousUserRole=anonymous"]
    east = broker_factory(*config)
    replicate_to_west(east, west, west.cluster_data() if where == "cluster" else None)
    topic = f"persistent://public/default/tls-{where.replace('.', '-')}-{random.randrange(1 << 30)}"
    AdminClient(east.admin_url).create_partitioned_topic(topic, 2)
    producer = make(east.url).create_producer(topic)  # its partitions load; their replicators create them on west
    assert wait_for(lambda: west.admin().partitions(topic) == 2)
    consumer = make(west.broker.tls_url, tls_trust_certs_file_path=str(west.ca.pem),
                    authentication=module.AuthenticationToken(west.token("admin"))).subscribe(topic, "sub")
    for i in range(100):
        producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i}")
    producer.flush()
    assert sorted(receive_all(consumer, 100)) == sorted(f"m{i}".encode() for i in range(100))


@pytest.mark.parametrize("plugin", ["AuthenticationTls", "AuthenticationBasic"])
def test_replication_with_a_client_certificate_or_basic_credentials(broker_factory, west, client_factory, plugin):
    """The cluster's authenticationPlugin as pulsar-admin's --auth-plugin takes it: a client
    certificate whose common name is the role (mutual TLS), or a user and password."""
    if plugin == "AuthenticationTls":
        pair = west.ca.issue("replicator-client", "replicator")
        params = f"tlsCertFile:{pair.cert},tlsKeyFile:{pair.key}"
    else:
        params = json.dumps({"userId": "replicator", "password": BASIC_PASSWORD})
    east = broker_factory("clusterName=east")
    replicate_to_west(east, west, west.cluster_data(authenticationPlugin=f"org.apache.pulsar.client.impl.auth.{plugin}",
                                                    authenticationParameters=params))
    topic = f"persistent://public/default/{plugin.lower()}-{random.randrange(1 << 30)}"
    consumer = client_factory(west.broker.tls_url, tls_trust_certs_file_path=str(west.ca.pem),
                              authentication=pulsar.AuthenticationToken(west.token("admin"))).subscribe(topic, "sub")
    producer = client_factory(east.url).create_producer(topic)
    for i in range(20):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    assert receive_all(consumer, 20) == [f"m{i}".encode() for i in range(20)]


@pytest.mark.parametrize("wrong", ["token", "token, binary protocol only", "certificate authority"])
def test_wrong_credentials_are_reported_and_retried_until_put_right(broker_factory, west, client_factory, wrong):
    """A token west did not sign, or a CA that did not sign west's certificate: the replicator
    says why in its stats (lastError), is not connected, keeps the backlog; once the cluster's
    data is updated it connects at once (the update wakes its back-off) and delivers all of it.
    Without serviceUrlTls the token is refused at CONNECT, not by the admin API."""
    east = broker_factory("clusterName=east")
    bad: dict[str, object] = ({"authenticationParameters": f"token:{west.token('replicator', secrets.token_bytes(32))}"}
                              if wrong.startswith("token") else {"brokerClientTrustCertsFilePath": str(west.rogue.pem)})
    admin_url = {"serviceUrlTls": None} if "binary" in wrong else {}
    admin = replicate_to_west(east, west, west.cluster_data(**bad, **admin_url))
    topic = f"persistent://public/default/wrong-{random.randrange(1 << 30)}"
    producer = client_factory(east.url).create_producer(topic)
    for i in range(50):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()

    def replicator() -> dict:
        return admin.stats(topic)["replication"]["west"]

    expected = "authenticat" if wrong.startswith("token") else "certificate verify failed"
    assert wait_for(lambda: expected in replicator()["lastError"].lower(), timeout=30), replicator()
    stats = replicator()
    assert stats["connected"] is False and stats["replicationBacklog"] == 50
    admin.update_cluster("west", west.cluster_data(**admin_url))
    client = client_factory(west.broker.tls_url, tls_trust_certs_file_path=str(west.ca.pem),
                            authentication=pulsar.AuthenticationToken(west.token("admin")))
    received = receive_all(client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest), 50)
    assert received == [f"m{i}".encode() for i in range(50)]
    assert wait_for(lambda: replicator()["replicationBacklog"] == 0 and replicator()["connected"])
    assert replicator()["lastError"] == ""


def test_a_cluster_asking_for_java_key_stores_is_refused_with_the_field_named(broker_factory, west, client_factory):
    east = broker_factory("clusterName=east")
    admin = replicate_to_west(east, west, west.cluster_data(brokerClientTlsEnabledWithKeyStore=True))
    topic = f"persistent://public/default/keystore-{random.randrange(1 << 30)}"
    client_factory(east.url).create_producer(topic).send(b"stays")
    assert wait_for(lambda: "brokerClientTlsEnabledWithKeyStore" in
                    admin.stats(topic)["replication"]["west"]["lastError"])
    assert admin.stats(topic)["replication"]["west"]["replicationBacklog"] == 1


def endpoint(data: dict, **config: str):
    settings = ServiceConfiguration()
    settings.apply(config)
    return remote_endpoint("west", data, settings)


def test_how_a_remote_is_reached_is_chosen_as_pulsar_chooses_it():
    """The cluster's TLS settings over broker.conf's; broker.conf's token for the admin client
    always, for the binary client only with authenticationEnabled; mTLS files as a pair."""
    plain = {"brokerServiceUrl": "pulsar://w:6650", "serviceUrl": "http://w:8080",
             "brokerServiceUrlTls": "pulsar+ssl://w:6651", "serviceUrlTls": "https://w:8443"}
    token = {"brokerClientAuthenticationPlugin": TOKEN_PLUGIN, "brokerClientAuthenticationParameters": "token:abc"}
    reached = endpoint(plain, **token)
    assert (reached.broker_url, reached.admin_url) == ("pulsar://w:6650", "http://w:8080")
    assert reached.security.authentication.auth_data() == b""
    assert reached.admin_security.authentication.auth_data() == b"abc"
    assert endpoint(plain, **token, authenticationEnabled="true").security.authentication.auth_data() == b"abc"
    broker_tls = endpoint(plain, brokerClientTlsEnabled="true", brokerClientTrustCertsFilePath="/ca.pem",
                          tlsAllowInsecureConnection="true", brokerClientCertificateFilePath="/c.pem",
                          brokerClientKeyFilePath="/k.pem")
    assert (broker_tls.broker_url, broker_tls.admin_url) == ("pulsar+ssl://w:6651", "https://w:8443")
    assert broker_tls.security.tls_trust_certs_file_path == "/ca.pem"
    assert broker_tls.security.tls_allow_insecure_connection is True
    assert broker_tls.security.tls_certificate == ("/c.pem", "/k.pem")
    own = endpoint({**plain, "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": "/own.pem",
                    "brokerClientCertificateFilePath": "/c.pem"},
                   brokerClientTlsEnabled="true", brokerClientTrustCertsFilePath="/ca.pem")
    assert own.security.tls_trust_certs_file_path == "/own.pem"
    assert own.security.tls_certificate is None  # a certificate without its key is no pair
    with pytest.raises(RemoteSettingsError, match="no brokerServiceUrlTls"):
        endpoint({"brokerServiceUrl": "pulsar://w:6650", "brokerClientTlsEnabled": True})
    with pytest.raises(RemoteSettingsError, match="cluster west's authenticationPlugin: basic auth params"):
        endpoint({**plain, "authenticationPlugin": "basic", "authenticationParameters": "nope"})
