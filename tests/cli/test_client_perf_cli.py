"""`magnetar client` and `magnetar perf` end to end against a real broker, checked with the
official client on the other side."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid

import pulsar
from admin_http import get_json


def magnetar(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "magnetar", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def topic_name() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def test_produce_is_what_the_official_client_receives(broker, client_factory, tmp_path):
    topic = topic_name()
    consumer = client_factory(broker.url).subscribe(topic, "check")
    attachment = tmp_path / "blob.bin"
    attachment.write_bytes(bytes(range(256)))
    result = magnetar("client", "--url", broker.url, "produce", topic, "-m", "one|two", "-s", "|",
                      "-f", str(attachment), "-n", "2", "-p", "a=1,b=2", "-p", "c=3", "-k", "user-7")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "6 messages successfully produced"
    received = [consumer.receive(10_000) for _ in range(6)]
    assert [m.data() for m in received] == [b"one", b"two", bytes(range(256))] * 2
    assert {m.partition_key() for m in received} == {"user-7"}
    assert all(m.properties() == {"a": "1", "b": "2", "c": "3"} for m in received)


def test_consume_prints_and_acknowledges(broker, client_factory):
    topic = topic_name()
    producer = client_factory(broker.url).create_producer(topic)
    for i in range(3):
        producer.send(f"hello-{i}".encode(), properties={"n": str(i)}, partition_key=f"k{i}")
    result = magnetar("client", "--url", broker.url, "consume", topic, "-s", "cli", "-p", "Earliest", "-n", "2",
                      "-t", "Shared")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines.count("----- got message -----") == 2
    assert "key:[k0], properties:[n=0], content:hello-0" in lines
    assert "key:[k1], properties:[n=1], content:hello-1" in lines
    assert lines[-1] == "2 messages successfully consumed"
    stats = get_json(f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats")
    assert stats["subscriptions"]["cli"]["msgBacklog"] == 1  # the two printed were acknowledged
    hexed = magnetar("client", "--url", broker.url, "consume", topic, "-s", "cli", "--hex", "--hide-content")
    assert hexed.returncode == 0 and "content:" not in hexed.stdout


def test_bad_flags_are_named_and_exit_2(broker):
    no_messages = magnetar("client", "--url", broker.url, "produce", "t")
    assert no_messages.returncode == 2 and "-m/--messages or -f/--files" in no_messages.stderr
    missing_file = magnetar("client", "--url", broker.url, "produce", "t", "-f", "/nonexistent/x")
    assert missing_file.returncode == 2 and "-f/--files" in missing_file.stderr
    bad_type = magnetar("client", "consume", "t", "-s", "s", "-t", "Sharde")
    assert bad_type.returncode == 2 and "Key_Shared" in bad_type.stderr
    bad_property = magnetar("client", "produce", "t", "-m", "x", "-p", "novalue")
    assert bad_property.returncode == 2 and "key=value" in bad_property.stderr
    bad_rate = magnetar("perf", "produce", "t", "-r", "-5")
    assert bad_rate.returncode == 2 and "negative" in bad_rate.stderr
    bad_url = magnetar("client", "--url", "kafka://x:1", "produce", "t", "-m", "x")
    assert bad_url.returncode == 2 and "kafka://x:1" in bad_url.stderr


def test_an_unreachable_broker_exits_1():
    with socket.socket() as probe:  # a port nobody listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        result = magnetar("client", "--url", f"pulsar://127.0.0.1:{probe.getsockname()[1]}",
                          "--operation-timeout", "1", "produce", "t", "-m", "x")
    # as pulsar-client: retried up to the operation timeout, then a timeout naming the cause
    assert result.returncode == 1 and "Timeout" in result.stderr and "cannot connect" in result.stderr


def test_a_bad_operation_timeout_names_the_flag():
    result = magnetar("client", "--operation-timeout", "-1", "produce", "t", "-m", "x")
    assert result.returncode == 2 and "--operation-timeout" in result.stderr


def test_perf_produce_then_consume(broker, client_factory):
    topic = topic_name()
    reader = client_factory(broker.url).subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    # Paced to last a quarter of a second, so rate lines are printed however fast the broker is.
    produced = magnetar("perf", "produce", topic, "-u", broker.url, "-r", "20000", "-m", "5000", "-s", "64", "--json",
                        "--report-interval", "0.05")
    assert produced.returncode == 0, produced.stderr
    lines = produced.stdout.splitlines()
    summary = json.loads(lines[-1])
    assert summary["messages"] == 5000 and summary["failures"] == 0
    assert summary["latency_ms"]["p50"] <= summary["latency_ms"]["p99"] <= summary["latency_ms"]["max"]
    assert any(line.startswith("Produced: ") for line in lines[:-1])  # a rate line while running
    assert sum(1 for _ in iter(lambda: _receive(reader), None)) == 5000

    consumed = magnetar("perf", "consume", topic, "-u", broker.url, "-ss", "perf", "-sp", "Earliest", "-m", "5000",
                        "--json")
    assert consumed.returncode == 0, consumed.stderr
    summary = json.loads(consumed.stdout.splitlines()[-1])
    assert summary["messages"] == 5000 and summary["msg_per_s"] > 0
    stats = get_json(f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats")
    assert stats["subscriptions"]["perf"]["msgBacklog"] == 0


def _receive(consumer) -> object | None:
    try:
        message = consumer.receive(2000)
    except pulsar.Timeout:
        return None
    consumer.acknowledge(message)
    return message
