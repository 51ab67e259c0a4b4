"""Subscription operations named on a partitioned topic, as Pulsar's PersistentTopicsBase does
them: create, unsubscribe, clear-backlog, reset-cursor to a time, expire-messages and the
properties apply to every partition; skip, peek, examine and reset-cursor to a message id
(one partition's entries) are refused with 405 and Pulsar's reason. Over HTTP and with
`magnetar admin topics`, against a real standalone and the official client.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import pulsar
import pytest
from admin_http import get_json, http
from polling import wait_for
from seeds import fresh_seed
from standalone import Standalone

BASE = "/admin/v2/persistent/public/default"
EARLIEST = {"ledgerId": -1, "entryId": -1}


def call(broker: Standalone, method: str, path: str, body: object = None) -> tuple[int, object]:
    raw = None if body is None else json.dumps(body).encode()
    status, _, answer = http(method, f"{broker.admin_url}{BASE}/{path}", raw)
    try:
        return status, json.loads(answer) if answer else None
    except ValueError:
        return status, answer


def partitioned(broker: Standalone, client: pulsar.Client, topic: str, partitions: int,
                messages: int) -> list[int]:
    """A partitioned topic with `messages` spread over its partitions; how many each holds."""
    assert call(broker, "PUT", f"{topic}/partitions", partitions)[0] == 204
    producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False,
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    held = Counter(producer.send(f"m{i}".encode()).partition() for i in range(messages))
    producer.close()
    return [held[i] for i in range(partitions)]


def backlogs(broker: Standalone, topic: str, sub: str, partitions: int) -> list[int | None]:
    """Each partition's backlog of `sub`, None where the partition has no such subscription."""
    found = []
    for i in range(partitions):
        subs = get_json(f"{broker.admin_url}{BASE}/{topic}-partition-{i}/stats")["subscriptions"]
        found.append(subs[sub]["msgBacklog"] if sub in subs else None)
    return found


def test_subscription_lifecycle_on_every_partition(module_broker, module_client):
    broker, client = module_broker, module_client
    rng = random.Random(fresh_seed())
    partitions = rng.randrange(2, 6)
    topic = f"lifecycle-{partitions}"
    held = partitioned(broker, client, topic, partitions, rng.randrange(3 * partitions, 40))
    assert call(broker, "PUT", f"{topic}/subscription/ops", EARLIEST)[0] == 204
    assert backlogs(broker, topic, "ops", partitions) == held
    assert call(broker, "GET", f"{topic}/subscriptions") == (200, ["ops"])

    # 409 only when every partition has it; one that lost it gets it back
    assert call(broker, "PUT", f"{topic}/subscription/ops") == (
        409, {"reason": "Subscription already exists for topic"})
    assert call(broker, "DELETE", f"{topic}-partition-1/subscription/ops")[0] == 204
    assert call(broker, "PUT", f"{topic}/subscription/ops", EARLIEST)[0] == 204
    assert backlogs(broker, topic, "ops", partitions) == held

    assert call(broker, "POST", f"{topic}/subscription/ops/skip_all")[0] == 204
    assert backlogs(broker, topic, "ops", partitions) == [0] * partitions
    assert call(broker, "POST", f"{topic}/subscription/ops/resetcursor/0")[0] == 204
    assert backlogs(broker, topic, "ops", partitions) == held
    assert call(broker, "POST", f"{topic}/subscription/ops/expireMessages/0")[0] == 204
    assert backlogs(broker, topic, "ops", partitions) == [0] * partitions

    assert call(broker, "PUT", f"{topic}/subscription/ops/properties", {"team": "a"})[0] == 204
    assert all(get_json(f"{broker.admin_url}{BASE}/{topic}-partition-{i}/subscription/ops/properties")
               == {"team": "a"} for i in range(partitions))
    assert call(broker, "GET", f"{topic}/subscription/ops/properties") == (200, {"team": "a"})

    assert call(broker, "DELETE", f"{topic}/subscription/ops")[0] == 204
    assert backlogs(broker, topic, "ops", partitions) == [None] * partitions
    assert call(broker, "DELETE", f"{topic}/subscription/ops")[0] == 404
    assert call(broker, "POST", f"{topic}/subscription/ops/skip_all")[0] == 404


def test_reset_to_a_time_redelivers_every_partition_to_a_consumer(module_broker, module_client):
    broker, client = module_broker, module_client
    topic = "reset-consumer"
    held = partitioned(broker, client, topic, 3, 12)
    consumer = client.subscribe(f"persistent://public/default/{topic}", "sub",
                                initial_position=pulsar.InitialPosition.Earliest)

    def receive_all() -> list[bytes]:
        got = [consumer.receive(timeout_millis=10_000) for _ in range(sum(held))]
        for msg in got:
            consumer.acknowledge(msg)
        return sorted(msg.data() for msg in got)

    first = receive_all()
    assert wait_for(lambda: backlogs(broker, topic, "sub", 3) == [0, 0, 0])  # the acks arrived
    assert call(broker, "DELETE", f"{topic}/subscription/sub") == (
        412, {"reason": "Subscription has active connected consumers"})
    assert call(broker, "POST", f"{topic}/subscription/sub/resetcursor/0")[0] == 204
    assert receive_all() == first
    consumer.close()
    assert call(broker, "DELETE", f"{topic}/subscription/sub")[0] == 204


@pytest.mark.parametrize(("method", "path", "body", "reason"), [
    ("GET", "subscription/sub/position/1", None, "Peek messages on a partitioned topic is not allowed"),
    ("POST", "subscription/sub/skip/1", None, "Skip messages on a partitioned topic is not allowed"),
    ("POST", "subscription/sub/resetcursor", EARLIEST, "Reset-cursor at position is not allowed for partitioned-topic"),
    ("GET", "examinemessage?initialPosition=earliest&messagePosition=1", None,
     "Examine messages on a partitioned topic is not allowed, please try examine message on specific topic partition"),
])
def test_one_partition_operations_are_refused_with_405(module_broker, module_client, method, path, body, reason):
    broker, client = module_broker, module_client
    topic = f"refused-{path.split('/')[-2] if '/' in path else 'examine'}"
    partitioned(broker, client, topic, 2, 4)
    assert call(broker, "PUT", f"{topic}/subscription/sub", EARLIEST)[0] == 204
    assert call(broker, method, f"{topic}/{path}", body) == (405, {"reason": reason})
    assert backlogs(broker, topic, "sub", 2) == [2, 2]  # nothing moved


def magnetar_admin(broker: Standalone, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url, *args],
                          capture_output=True, text=True, timeout=60, check=False)


def test_admin_cli_on_a_partitioned_topic(module_broker, module_client):
    broker, client = module_broker, module_client
    topic, partitions = "cli-parted", 3
    held = partitioned(broker, client, topic, partitions, 9)
    name = f"persistent://public/default/{topic}"
    assert magnetar_admin(broker, "topics", "create-subscription", name, "-s", "sub", "-m", "earliest").returncode == 0
    assert backlogs(broker, topic, "sub", partitions) == held
    assert magnetar_admin(broker, "topics", "clear-backlog", name, "-s", "sub").returncode == 0
    assert backlogs(broker, topic, "sub", partitions) == [0] * partitions
    assert magnetar_admin(broker, "topics", "reset-cursor", name, "-s", "sub", "-t", "1h").returncode == 0
    assert backlogs(broker, topic, "sub", partitions) == held
    assert magnetar_admin(broker, "topics", "expire-messages", name, "-s", "sub", "-t", "0s").returncode == 0
    assert backlogs(broker, topic, "sub", partitions) == [0] * partitions
    refused = magnetar_admin(broker, "topics", "peek-messages", name, "-s", "sub", "-n", "1")
    assert refused.returncode == 1 and "Peek messages on a partitioned topic is not allowed" in refused.stderr
    assert magnetar_admin(broker, "topics", "unsubscribe", name, "-s", "sub").returncode == 0
    assert backlogs(broker, topic, "sub", partitions) == [None] * partitions
