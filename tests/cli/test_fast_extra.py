"""The [fast] extra (uvloop) end to end: a `magnetar standalone` and magnetar.client on uvloop.

The suite's venv has no uvloop on purpose (installed there, it would switch every test's broker
and client to it), so this module installs it into a directory of its own once and puts that
directory on the PYTHONPATH of the processes it starts: the broker, and a subprocess running
magnetar.client's blocking facade. Then it drives them as users would, through every listener
whose transport code once assumed asyncio's classes (uvloop's transports are not
asyncio.Transport subclasses): the binary protocol with both clients, the admin API, the Kafka
listener.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import http
from confluent_kafka import Consumer, Producer
from polling import wait_for
from standalone import Standalone

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
UVLOOP_REQUIREMENT = "uvloop>=0.21"  # pyproject.toml's [fast] extra


@pytest.fixture(scope="module")
def fast_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a process with the [fast] extra: uvloop importable, ahead of the rest."""
    target = tmp_path_factory.mktemp("uvloop-target")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--target", str(target), UVLOOP_REQUIREMENT], check=True, timeout=300)
    path = os.pathsep.join(p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


@pytest.fixture(scope="module")
def fast_broker(tmp_path_factory: pytest.TempPathFactory, fast_env: dict[str, str]) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("fast") / "data", args=["--kafka", "0"], env=fast_env).start()
    yield broker
    broker.stop()


def _topic() -> str:
    return f"fast-{uuid.uuid4().hex[:10]}"


def test_the_broker_says_it_runs_on_uvloop(fast_broker: Standalone) -> None:
    assert re.search(r"event loop: uvloop \d", fast_broker.log()), fast_broker.log()


def test_the_official_client_produces_and_consumes_with_batching(fast_broker: Standalone, client_factory) -> None:
    client = client_factory(fast_broker.url)
    topic = f"persistent://public/default/{_topic()}"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)  # batching on, the default
    payloads = [random.randbytes(random.randint(0, 2000)) for _ in range(random.randint(100, 400))]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    received = []
    for _ in payloads:
        message = consumer.receive(timeout_millis=10_000)
        received.append(message.data())
        consumer.acknowledge(message)
    assert received == payloads


MAGNETAR_CLIENT = textwrap.dedent("""
    import json, sys
    from magnetar.client import Client, InitialPosition

    url, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = Client(url, operation_timeout_seconds=10)
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic)
    sent = [f"m-{i}".encode() * (i % 7) for i in range(count)]
    for payload in sent:
        producer.send_async(payload, None)
    producer.flush()
    received = []
    for _ in sent:
        message = consumer.receive(timeout_millis=10_000)
        received.append(message.data())
        consumer.acknowledge(message)
    loop = type(client._io.loop)
    client.close()
    print(json.dumps({"loop": f"{loop.__module__}.{loop.__name__}", "in_order": received == sent}))
""")


def test_magnetar_client_on_uvloop_produces_and_consumes(fast_broker: Standalone, fast_env: dict[str, str]) -> None:
    topic = f"persistent://public/default/{_topic()}"
    done = subprocess.run([sys.executable, "-c", MAGNETAR_CLIENT, fast_broker.url, topic, "300"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **fast_env}, check=False)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"loop": "uvloop.Loop", "in_order": True}


def _admin(broker: Standalone, method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    status, _, answer = http(method, f"{broker.admin_url}/admin/v2/{path}", data)
    assert status in (200, 204), (method, path, status, answer)
    return json.loads(answer) if answer else None


def test_the_admin_api_answers(fast_broker: Standalone, client_factory) -> None:
    tenant = _topic()
    _admin(fast_broker, "PUT", f"tenants/{tenant}", {"adminRoles": [], "allowedClusters": ["standalone"]})
    _admin(fast_broker, "PUT", f"namespaces/{tenant}/ns")
    _admin(fast_broker, "PUT", f"persistent/{tenant}/ns/t")
    assert _admin(fast_broker, "GET", f"persistent/{tenant}/ns") == [f"persistent://{tenant}/ns/t"]
    producer = client_factory(fast_broker.url).create_producer(f"persistent://{tenant}/ns/t")
    for i in range(5):
        producer.send(f"m{i}".encode())
    stats = _admin(fast_broker, "GET", f"persistent/{tenant}/ns/t/stats")
    assert stats["msgInCounter"] == 5
    assert len(stats["publishers"]) == 1


def test_a_kafka_client_produces_and_consumes(fast_broker: Standalone) -> None:
    bootstrap = f"127.0.0.1:{KAFKA_READY.findall(fast_broker.log())[-1]}"
    topic = _topic()
    records = [(str(i).encode(), random.randbytes(random.randint(0, 500))) for i in range(random.randint(20, 200))]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    delivered: list = []
    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    assert producer.flush(30) == 0
    assert sorted(delivered) == list(range(len(records)))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fast", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list = []

    def more() -> bool:
        for message in consumer.consume(len(records) - len(got), timeout=0.2):
            assert message.error() is None, message.error()
            got.append((message.key(), message.value()))
        return len(got) >= len(records)

    try:
        assert wait_for(more, timeout=30), f"{len(got)} of {len(records)} records"
    finally:
        consumer.close()
    assert got == records
