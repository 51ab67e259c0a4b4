"""`magnetar admin` end to end against a real broker, as an operator types it."""

from __future__ import annotations

import json
import subprocess
import sys


def magnetar(*args: str, admin_url: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "magnetar", *args]
    if admin_url is not None:
        command[3:3] = ["admin", "--admin-url", admin_url]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_version_and_help():
    assert magnetar("--version").stdout.startswith("magnetar ")
    for verb in (["standalone"], ["admin"], ["admin", "topics"], ["admin", "topics", "reset-cursor"]):
        result = magnetar(*verb, "--help")
        assert result.returncode == 0 and "usage:" in result.stdout, verb


def test_admin_walkthrough(broker, client_factory):
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return magnetar(*args, admin_url=broker.admin_url)

    assert admin("tenants", "list").stdout.split() == ["public", "pulsar"]
    assert admin("tenants", "create", "acme").returncode == 0
    assert admin("namespaces", "create", "acme/ns").returncode == 0
    assert admin("namespaces", "set-message-ttl", "acme/ns", "-ttl", "120").returncode == 0
    assert admin("namespaces", "get-message-ttl", "acme/ns").stdout.strip() == "120"
    topic = "persistent://acme/ns/cli"
    assert admin("topics", "create-partitioned-topic", "persistent://acme/ns/parted", "-p", "3").returncode == 0
    assert json.loads(admin("--json", "topics", "list", "acme/ns").stdout) == [
        f"persistent://acme/ns/parted-partition-{i}" for i in range(3)]

    producer = client_factory(broker.url).create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"m{i}".encode(), properties={"n": str(i)})
    assert admin("topics", "create-subscription", topic, "-s", "sub", "-m", "earliest").returncode == 0
    assert admin("topics", "subscriptions", topic).stdout.split() == ["sub"]
    peek = admin("topics", "peek-messages", topic, "-s", "sub", "-n", "2").stdout
    assert "m0" in peek and "m1" in peek and "property n: 1" in peek
    assert admin("topics", "skip", topic, "-s", "sub", "-n", "3").returncode == 0
    stats = json.loads(admin("topics", "stats", topic).stdout)
    assert stats["subscriptions"]["sub"]["msgBacklog"] == 2
    assert admin("topics", "reset-cursor", topic, "-s", "sub", "-t", "1h").returncode == 0
    assert json.loads(admin("--json", "topics", "stats", topic).stdout)["subscriptions"]["sub"]["msgBacklog"] == 5
    assert admin("topics", "clear-backlog", topic, "-s", "sub").returncode == 0
    assert "m4" in admin("topics", "examine-message", topic, "-i", "latest", "-m", "1").stdout

    refused = admin("topics", "delete", topic)
    assert refused.returncode == 1 and "Topic has active producers/subscriptions" in refused.stderr
    producer.close()
    assert admin("topics", "delete", topic).returncode == 0
    missing = admin("topics", "stats", topic)
    assert missing.returncode == 1 and "404" in missing.stderr


def test_usage_errors_exit_2(broker):
    result = magnetar("topics", "reset-cursor", "t", "-s", "sub", "-t", "soon", admin_url=broker.admin_url)
    assert result.returncode == 2 and "duration" in result.stderr
    result = magnetar("topics", "skip", "t", admin_url=broker.admin_url)
    assert result.returncode == 2 and "--subscription" in result.stderr


def test_unreachable_broker_exits_1():
    result = magnetar("tenants", "list", admin_url="http://127.0.0.1:1")
    assert result.returncode == 1 and "cannot reach" in result.stderr



def test_policy_verbs(broker, client_factory):
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return magnetar(*args, admin_url=broker.admin_url)

    assert admin("namespaces", "set-max-producers-per-topic", "public/default", "-p", "1").returncode == 0
    assert admin("namespaces", "get-max-producers-per-topic", "public/default").stdout.strip() == "1"
    client = client_factory(broker.url)
    client.create_producer("limited")
    topic = "persistent://public/default/limited"
    assert admin("topics", "set-max-producers", topic, "-p", "2").returncode == 0
    client.create_producer("limited")  # the topic's own limit lets a second one in
    assert admin("namespaces", "remove-max-producers-per-topic", "public/default").returncode == 0
    assert admin("namespaces", "get-max-producers-per-topic", "public/default").stdout.strip() == ""
    assert admin("namespaces", "set-delayed-delivery", "public/default", "-d").returncode == 0
    assert json.loads(admin("--json", "namespaces", "get-delayed-delivery", "public/default").stdout) == {
        "active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}
    both = admin("namespaces", "set-delayed-delivery", "public/default", "-e", "-d")
    assert both.returncode == 2 and "--enable/-e" in both.stderr
    refused = admin("namespaces", "set-schema-compatibility-strategy", "public/default", "-c", "SOMETIMES")
    assert refused.returncode == 1 and "Invalid value" in refused.stderr and "(412)" in refused.stderr


def test_publish_rate_verbs(broker):
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return magnetar(*args, admin_url=broker.admin_url)

    assert admin("namespaces", "set-publish-rate", "public/default", "--msg-publish-rate", "100").returncode == 0
    assert json.loads(admin("--json", "namespaces", "get-publish-rate", "public/default").stdout) == {
        "publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
    topic = "persistent://public/default/rated"
    assert admin("topics", "set-publish-rate", topic, "-m", "5", "-b", "1000").returncode == 0
    assert json.loads(admin("--json", "topics", "get-publish-rate", topic).stdout) == {
        "publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": 1000}
    refused = admin("topics", "set-publish-rate", topic, "-m", "-7")
    assert refused.returncode == 1 and "publishThrottlingRateInMsg" in refused.stderr and "(412)" in refused.stderr
    for where, name in (("topics", topic), ("namespaces", "public/default")):
        assert admin(where, "remove-publish-rate", name).returncode == 0
        assert admin(where, "get-publish-rate", name).stdout.strip() == ""


def test_replicator_dispatch_rate_verbs(broker):
    """pulsar-admin's flags (-md, -bd, -dt), on a namespace and on a topic."""
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return magnetar(*args, admin_url=broker.admin_url)

    set_rate = admin("namespaces", "set-replicator-dispatch-rate", "public/default", "-md", "100", "-dt", "2")
    assert set_rate.returncode == 0, set_rate.stderr
    assert json.loads(admin("--json", "namespaces", "get-replicator-dispatch-rate", "public/default").stdout) == {
        "dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 2,
        "relativeToPublishRate": False}
    topic = "persistent://public/default/replicator-rated"
    assert admin("topics", "set-replicator-dispatch-rate", topic, "--byte-dispatch-rate", "4096").returncode == 0
    assert json.loads(admin("--json", "topics", "get-replicator-dispatch-rate", topic).stdout)[
        "dispatchThrottlingRateInByte"] == 4096
    refused = admin("topics", "set-replicator-dispatch-rate", topic, "-dt", "0")
    assert refused.returncode == 1 and "ratePeriodInSecond" in refused.stderr and "(412)" in refused.stderr
    for where, name in (("topics", topic), ("namespaces", "public/default")):
        assert admin(where, "remove-replicator-dispatch-rate", name).returncode == 0
        assert admin(where, "get-replicator-dispatch-rate", name).stdout.strip() == ""


def test_retention_verbs(broker):
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return magnetar(*args, admin_url=broker.admin_url)

    assert admin("namespaces", "set-retention", "public/default", "--size", "10G", "--time", "2h").returncode == 0
    assert json.loads(admin("--json", "namespaces", "get-retention", "public/default").stdout) == {
        "retentionTimeInMinutes": 120, "retentionSizeInMB": 10240}
    topic = "persistent://public/default/kept"
    assert admin("topics", "create", topic).returncode == 0
    assert admin("topics", "set-retention", topic, "-s", "-1", "-t", "-1").returncode == 0
    assert json.loads(admin("--json", "topics", "get-retention", topic).stdout) == {
        "retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    assert admin("topics", "trim-topic", topic).returncode == 0
    refused = admin("topics", "set-retention", topic, "-s", "10M", "-t", "0")
    assert refused.returncode == 1 and "single time or size limit" in refused.stderr + refused.stdout
    assert admin("namespaces", "remove-retention", "public/default").returncode == 0
