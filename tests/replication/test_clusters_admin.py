"""Clusters, tenants' allowed clusters and namespaces' replication clusters over Pulsar's
REST paths and `magnetar admin`, with Pulsar's answers to what they refuse."""

from __future__ import annotations

import json
import subprocess
import sys

import pulsar
import pytest
from admin_http import http
from standalone import Standalone

CLUSTERS = "/admin/v2/clusters"


def call(broker, method: str, path: str, body: object = None) -> tuple[int, object]:
    raw = None if body is None else json.dumps(body).encode()
    status, _, answer = http(method, f"{broker.admin_url}{path}", raw)
    return status, json.loads(answer) if answer else None


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    broker = Standalone(tmp_path_factory.mktemp("clusters") / "data", ["clusterName=edge"]).start()
    yield broker
    broker.stop()


def test_the_local_cluster_is_clustername_and_exists_from_the_start(edge):
    assert call(edge, "GET", CLUSTERS) == (200, ["edge"])
    status, local = call(edge, "GET", f"{CLUSTERS}/edge")
    assert status == 200 and local["brokerServiceUrl"] == edge.url
    assert call(edge, "PUT", f"{CLUSTERS}/edge", {"serviceUrl": "http://x:1"}) == (
        409, {"reason": "Cluster already exists"})
    assert call(edge, "DELETE", f"{CLUSTERS}/edge") == (412, {"reason": "Cluster not empty"})
    assert call(edge, "GET", "/admin/v2/tenants/public")[1]["allowedClusters"] == ["edge"]


def test_cluster_lifecycle_and_refusals(edge):
    data = {"serviceUrl": "http://127.0.0.1:9", "brokerServiceUrl": "pulsar://127.0.0.1:9",
            "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "authenticationParameters": "token:xyz", "brokerClientTlsEnabled": False}
    assert call(edge, "PUT", f"{CLUSTERS}/central", data) == (204, None)
    assert call(edge, "GET", f"{CLUSTERS}/central") == (200, {**data, "authenticationParameters": "****"})
    assert call(edge, "GET", CLUSTERS) == (200, ["central", "edge"])
    assert call(edge, "PUT", f"{CLUSTERS}/central", data) == (409, {"reason": "Cluster already exists"})
    assert call(edge, "POST", f"{CLUSTERS}/central", {**data, "brokerServiceUrl": "pulsar://127.0.0.1:10"}) == (
        204, None)
    assert call(edge, "GET", f"{CLUSTERS}/central")[1]["brokerServiceUrl"] == "pulsar://127.0.0.1:10"
    assert call(edge, "POST", f"{CLUSTERS}/nowhere", data) == (404, {"reason": "Cluster does not exist"})
    assert call(edge, "GET", f"{CLUSTERS}/nowhere") == (404, {"reason": "Cluster does not exist"})
    status, answer = call(edge, "PUT", f"{CLUSTERS}/other", {"brokerServiceUrl": "http://wrong:1"})
    assert status == 412 and "brokerServiceUrl must start with pulsar://" in answer["reason"]
    status, answer = call(edge, "PUT", f"{CLUSTERS}/other", {"brokerServiceURL": "pulsar://x:1"})
    assert status == 412 and "'brokerServiceURL'" in answer["reason"] and "brokerServiceUrl" in answer["reason"]
    assert call(edge, "PUT", f"{CLUSTERS}/bad%20name", data)[0] == 412
    assert call(edge, "PUT", f"{CLUSTERS}/other", ["not", "an", "object"])[0] == 400
    assert call(edge, "DELETE", f"{CLUSTERS}/central") == (204, None)
    assert call(edge, "GET", CLUSTERS) == (200, ["edge"])


def test_a_namespace_replicates_only_to_clusters_that_exist_and_its_tenant_allows(edge):
    assert call(edge, "PUT", f"{CLUSTERS}/dc2", {"brokerServiceUrl": "pulsar://127.0.0.1:9"})[0] == 204
    assert call(edge, "PUT", "/admin/v2/tenants/acme", {"allowedClusters": ["edge"]})[0] == 204
    assert call(edge, "PUT", "/admin/v2/namespaces/acme/orders")[0] == 204
    path = "/admin/v2/namespaces/acme/orders/replication"
    assert call(edge, "GET", path) == (200, ["edge"])
    assert call(edge, "POST", path, ["edge", "dc2"]) == (
        403, {"reason": "Cluster [dc2] is not in the list of allowed clusters list for tenant [acme]"})
    assert call(edge, "POST", path, ["edge", "mars"]) == (403, {"reason": "Invalid cluster id: mars"})
    assert call(edge, "POST", path, ["global"]) == (
        412, {"reason": "Cannot specify global in the list of replication clusters"})
    assert call(edge, "POST", path, []) == (412, {"reason": "ClusterIds should not be null or empty"})
    assert call(edge, "POST", path, {"clusters": ["edge"]})[0] == 400
    assert call(edge, "POST", "/admin/v2/namespaces/acme/none/replication", ["edge"])[0] == 404
    assert call(edge, "PUT", "/admin/v2/tenants/other", {"allowedClusters": ["mars"]}) == (
        412, {"reason": "Clusters do not exist"})
    assert call(edge, "POST", "/admin/v2/tenants/acme", {"allowedClusters": ["edge", "dc2"]})[0] == 204
    assert call(edge, "POST", path, ["edge", "dc2"]) == (204, None)
    assert call(edge, "GET", path) == (200, ["dc2", "edge"])
    assert call(edge, "DELETE", f"{CLUSTERS}/dc2") == (412, {"reason": "Cluster not empty"})
    # the tenant cannot stop allowing a cluster its namespace replicates to
    status, answer = call(edge, "POST", "/admin/v2/tenants/acme", {"allowedClusters": ["edge"]})
    assert status == 409 and "['dc2']" in answer["reason"], answer
    assert call(edge, "GET", "/admin/v2/tenants/acme")[1]["allowedClusters"] == ["edge", "dc2"]
    assert call(edge, "POST", path, ["edge"]) == (204, None)
    assert call(edge, "POST", "/admin/v2/tenants/acme", {"allowedClusters": ["edge"]})[0] == 204
    assert call(edge, "DELETE", f"{CLUSTERS}/dc2") == (204, None)


def test_a_replicator_cursor_name_is_not_a_subscription(edge, client_factory):
    with pytest.raises(pulsar.NotAllowedError):
        client_factory(edge.url).subscribe("persistent://public/default/reserved", "pulsar.repl.elsewhere")


def magnetar_admin(broker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_mirrors_pulsar_admin(edge):
    created = magnetar_admin(edge, "clusters", "create", "hq", "--url", "http://127.0.0.1:9",
                             "--broker-url", "pulsar://127.0.0.1:9", "--tls-enable")
    assert created.returncode == 0, created.stderr
    shown = json.loads(magnetar_admin(edge, "clusters", "get", "hq").stdout)
    assert shown == {"serviceUrl": "http://127.0.0.1:9", "brokerServiceUrl": "pulsar://127.0.0.1:9",
                     "brokerClientTlsEnabled": True}
    assert magnetar_admin(edge, "clusters", "update", "hq", "--broker-url", "pulsar://127.0.0.1:10").returncode == 0
    assert json.loads(magnetar_admin(edge, "clusters", "get", "hq").stdout) == {
        "brokerServiceUrl": "pulsar://127.0.0.1:10"}
    assert "hq" in magnetar_admin(edge, "clusters", "list").stdout.split()
    assert magnetar_admin(edge, "tenants", "update", "public", "--allowed-clusters", "edge,hq").returncode == 0
    assert magnetar_admin(edge, "namespaces", "set-clusters", "public/default", "--clusters", "edge,hq") \
        .returncode == 0
    assert magnetar_admin(edge, "namespaces", "get-clusters", "public/default").stdout.split() == ["edge", "hq"]
    refused = magnetar_admin(edge, "clusters", "delete", "hq")
    assert refused.returncode != 0 and "Cluster not empty" in refused.stderr
    assert magnetar_admin(edge, "namespaces", "set-clusters", "public/default", "-c", "edge").returncode == 0
    assert magnetar_admin(edge, "clusters", "delete", "hq").returncode == 0
    topic = "persistent://public/default/cli-topic"
    assert magnetar_admin(edge, "topics", "set-replication-clusters", topic, "-c", "edge").returncode == 0
    assert magnetar_admin(edge, "topics", "get-replication-clusters", topic).stdout.split() == ["edge"]
    assert magnetar_admin(edge, "topics", "remove-replication-clusters", topic).returncode == 0
    bad = magnetar_admin(edge, "clusters", "create", "x", "--broker-url", "http://oops:1")
    assert bad.returncode != 0 and "brokerServiceUrl" in bad.stderr


def test_a_topics_replication_clusters_are_checked_as_a_namespaces(edge):
    path = "/admin/v2/persistent/public/default/own/replication"
    assert call(edge, "GET", path) == (200, None)
    assert call(edge, "POST", path, ["edge", "mars"]) == (403, {"reason": "Invalid cluster id: mars"})
    assert call(edge, "POST", path, []) == (412, {"reason": "ClusterIds should not be null or empty"})
    assert call(edge, "POST", path, "edge")[0] == 400
    assert call(edge, "POST", path, ["edge"]) == (204, None)
    assert call(edge, "GET", path) == (200, ["edge"])
    assert call(edge, "DELETE", path) == (204, None)
    assert call(edge, "GET", path) == (200, None)
    # a cluster a topic replicates to stays
    assert call(edge, "PUT", f"{CLUSTERS}/dc3", {"brokerServiceUrl": "pulsar://127.0.0.1:9"})[0] == 204
    assert call(edge, "POST", "/admin/v2/tenants/public", {"allowedClusters": ["edge", "dc3"]})[0] == 204
    assert call(edge, "POST", path, ["edge", "dc3"]) == (204, None)
    assert call(edge, "DELETE", f"{CLUSTERS}/dc3") == (412, {"reason": "Cluster not empty"})
    assert call(edge, "DELETE", path) == (204, None)
    assert call(edge, "DELETE", f"{CLUSTERS}/dc3") == (204, None)
    assert call(edge, "POST", "/admin/v2/tenants/public", {"allowedClusters": ["edge"]})[0] == 204
