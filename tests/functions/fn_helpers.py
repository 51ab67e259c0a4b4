"""What the functions tests share: deploying the code under tests/functions/code, reading
status, and a client that speaks less."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
from polling import wait_for

from magnetar.admin_client import AdminClient, AdminError, FunctionsAdmin

CODE = Path(__file__).parent / "code"
EXAMPLES = Path(__file__).parents[2] / "examples"


def functions_admin(admin_url: str) -> FunctionsAdmin:
    return FunctionsAdmin(AdminClient(admin_url))


def deploy(admin: FunctionsAdmin, name: str, code: str | Path, class_name: str, **config: Any) -> dict[str, Any]:
    """Create a function and wait until each of its instances has subscribed."""
    path = code if isinstance(code, Path) else CODE / code
    full = {"tenant": "public", "namespace": "default", "name": name, "className": class_name, **config}
    admin.create(full, path)
    wait_consumers(admin.admin, full, full.get("parallelism", 1))
    return full


def wait_consumers(admin: AdminClient, config: dict[str, Any], count: int) -> None:
    """Until `count` instances consume each input: what is sent afterwards reaches them
    (a function's subscription starts at the latest message, as Pulsar's do)."""
    subscription = config.get("subName") or f"{config['tenant']}/{config['namespace']}/{config['name']}"
    for topic in config["inputs"]:
        assert wait_for(lambda topic=topic: consumers(admin, topic, subscription) == count, timeout=30), (
            topic, consumers(admin, topic, subscription))


def status(admin: FunctionsAdmin, name: str) -> dict[str, Any]:
    return admin.status("public", "default", name)


def consumers(admin: AdminClient, topic: str, subscription: str) -> int:
    """The subscription's consumers on the topic (the fewest of any partition)."""
    try:
        names = [f"{topic}-partition-{i}" for i in range(admin.partitions(topic))] or [topic]
        return min(len(admin.stats(name)["subscriptions"].get(subscription, {}).get("consumers", []))
                   for name in names)
    except AdminError:  # the topic does not exist yet
        return 0


def make_client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def receive_all(consumer: pulsar.Consumer, count: int, timeout_ms: int = 20000) -> list[pulsar.Message]:
    messages = []
    for _ in range(count):
        message = consumer.receive(timeout_ms)
        consumer.acknowledge(message)
        messages.append(message)
    return messages


def magnetar_admin(admin_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`magnetar admin [--json] ARGS`: a `--json` among ARGS goes before the resource."""
    flags = ["--json"] if "--json" in args else []
    args = tuple(a for a in args if a != "--json")
    return subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", admin_url, *flags, *args],
                          capture_output=True, text=True, timeout=90, check=False)


def as_json(completed: subprocess.CompletedProcess[str]) -> Any:
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)
