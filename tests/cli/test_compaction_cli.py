"""`magnetar admin topics compact | compaction-status` and the automatic trigger."""

from __future__ import annotations

import json
import time

from test_admin_cli import magnetar


def test_compact_with_wait_and_status(broker, client_factory):
    producer = client_factory(broker.url).create_producer("cli-compact")
    for i in range(200):
        producer.send(f"v{i}".encode(), partition_key=f"k{i % 7}")
    result = magnetar("topics", "compact", "cli-compact", "--wait", admin_url=broker.admin_url)
    assert result.returncode == 0, result.stderr
    assert "100.0%" in result.stderr
    assert "success" in result.stdout
    status = json.loads(magnetar("--json", "topics", "compaction-status", "cli-compact",
                                 admin_url=broker.admin_url).stdout)
    assert status["status"] == "SUCCESS" and status["lastError"] == ""
    missing = magnetar("topics", "compact", "no-such-topic", admin_url=broker.admin_url)
    assert missing.returncode == 1 and "Topic not found" in missing.stderr


def test_threshold_triggers_compaction(broker_factory, client_factory):
    broker = broker_factory("brokerServiceCompactionMonitorIntervalInSeconds=1")
    producer = client_factory(broker.url).create_producer("auto")
    producer.send(b"first", partition_key="k")
    admin = ("--json", "topics")
    result = magnetar(*admin, "set-compaction-threshold", "auto", "-t", "1000", admin_url=broker.admin_url)
    assert result.returncode == 0, result.stderr
    assert json.loads(magnetar(*admin, "get-compaction-threshold", "auto", admin_url=broker.admin_url).stdout) == 1000
    for i in range(100):
        producer.send(b"x" * 100, partition_key=f"k{i % 3}")
    deadline = time.monotonic() + 30
    status = {}
    while time.monotonic() < deadline:
        status = json.loads(magnetar(*admin, "compaction-status", "auto", admin_url=broker.admin_url).stdout)
        if status["status"] == "SUCCESS":
            break
        time.sleep(0.2)
    assert status["status"] == "SUCCESS"
