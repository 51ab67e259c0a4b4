"""magnetar.testing.standalone in a thread of this process: a real broker on free ports,
driven by the official client and plain HTTP, and left behind by nothing once closed."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pulsar
import pytest
from admin_http import get_json, http
from broker_checks import (
    assert_gone,
    broker_threads,
    consume,
    consume_all,
    official_client,
    produce,
    refuses_connections,
    topic_name,
)
from polling import wait_for

import magnetar.testing
from magnetar.broker.config import ConfigError
from magnetar.client.aio import Client as AsyncClient
from magnetar.storage import DataDirLockedError


def test_serves_clients_and_admin_and_leaves_nothing_behind():
    with magnetar.testing.standalone() as broker:
        assert broker.service_url.startswith("pulsar://127.0.0.1:")
        assert broker.admin_url.startswith("http://127.0.0.1:")
        assert broker.data_dir.is_dir()
        client = official_client(broker)
        topic = topic_name()
        consumer = client.subscribe(topic, "sub")
        sent = produce(client, topic, 500)
        assert consume(consumer, len(sent)) == sent
        assert topic in get_json(f"{broker.admin_url}/admin/v2/persistent/public/default")
        client.close()
        urls = broker.service_url, broker.admin_url, broker.data_dir
    assert_gone(broker, *urls)


def test_the_body_raising_still_stops_it_and_removes_its_data():
    with pytest.raises(KeyError), magnetar.testing.standalone() as broker:
        urls = broker.service_url, broker.admin_url, broker.data_dir
        raise KeyError("the test failed")
    assert_gone(broker, *urls)


def test_configuration_keys_take_effect_with_python_values():
    config = {"allowAutoTopicCreation": False, "maxNumPartitionsPerPartitionedTopic": 3,
              "brokerEntryMetadataInterceptors": ["org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"],
              "delayedDeliveryTickTimeMillis": "250"}
    with magnetar.testing.standalone(config) as broker:
        runtime = get_json(f"{broker.admin_url}/admin/v2/brokers/configuration/runtime")
        assert {key: runtime[key] for key in config} == {
            "allowAutoTopicCreation": "false", "maxNumPartitionsPerPartitionedTopic": "3",
            "brokerEntryMetadataInterceptors": "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor",
            "delayedDeliveryTickTimeMillis": "250"}
        client = official_client(broker)
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer(topic_name())
        client.close()
        status, _, body = http("PUT", f"{broker.admin_url}/admin/v2/persistent/public/default/p/partitions", b"4")
        assert status == 412 and "less than or equal to 3" in json.loads(body)["reason"]


def test_the_defaults_of_magnetar_standalone(broker):
    """`broker` is a `magnetar standalone` process (tests/conftest.py): whatever defaults the
    command gets, a test broker gets them too (but the free ports each bound)."""
    def settings(admin_url: str) -> dict:
        runtime = get_json(f"{admin_url}/admin/v2/brokers/configuration/runtime")
        return {key: value for key, value in runtime.items() if key not in ("brokerServicePort", "webServicePort")}

    with magnetar.testing.standalone() as ours:
        assert settings(ours.admin_url) == settings(broker.admin_url)


@pytest.mark.parametrize(("config", "named"), [
    ({"brokerDeleteInactiveTopicEnabled": "false"}, "brokerDeleteInactiveTopicsEnabled"),  # a typo: the nearest key
    ({"maxMessageSize": -1}, "maxMessageSize"),
    ({"allowAutoTopicCreation": "yes"}, "allowAutoTopicCreation"),
])
def test_a_bad_key_or_value_is_refused_naming_it(config, named, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the broker's directory would go
    broker = magnetar.testing.standalone(config)
    with pytest.raises(ConfigError, match=named) as refused:
        broker.start()
    assert f"config[{next(iter(config))!r}]" in str(refused.value)
    assert not broker_threads() and not broker.running
    assert not list(tmp_path.iterdir()), "checked before anything is made"


def test_two_at_once_and_one_data_dir_locked_once(tmp_path):
    data_dir = tmp_path / "shared"
    with magnetar.testing.standalone(data_dir=data_dir) as first, magnetar.testing.standalone() as second:
        assert first.service_url != second.service_url and first.data_dir != second.data_dir
        with pytest.raises(DataDirLockedError):
            magnetar.testing.standalone(data_dir=data_dir).start()
        clients = [official_client(broker) for broker in (first, second)]
        topic = topic_name()
        consumer = clients[1].subscribe(topic, "sub")
        sent = produce(clients[0], topic, 50)
        assert consume(clients[0].subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest), 50) == sent
        with pytest.raises(pulsar.Timeout):
            consumer.receive(300)  # the second broker never saw the first one's messages
        for client in clients:
            client.close()
    assert data_dir.is_dir(), "a data dir the caller gave is the caller's"
    assert not broker_threads()


def test_restart_keeps_data_and_ports_and_clients_reconnect():
    with magnetar.testing.standalone() as broker:
        urls = broker.service_url, broker.admin_url
        client = official_client(broker)
        topic = topic_name()
        consumer = client.subscribe(topic, "sub")
        before = produce(client, topic, 200)
        broker.restart()
        assert (broker.service_url, broker.admin_url) == urls
        after = produce(client, topic, 200)
        assert consume_all(consumer, before + after) == set(before + after)
        client.close()


def test_a_failed_start_releases_the_data_dir(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=str(port)), magnetar.testing.standalone(
                {"webServicePort": port}, data_dir=tmp_path / "data"):
            pass
    assert not broker_threads()
    with magnetar.testing.standalone(data_dir=tmp_path / "data") as broker:
        assert broker.running


def test_the_process_keeps_its_signals_logging_and_collector():
    def state():
        return (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), gc.get_threshold(),
                gc.get_freeze_count(), list(logging.getLogger().handlers), logging.getLogger().level,
                asyncio.get_event_loop_policy())

    before = state()
    with magnetar.testing.standalone():
        assert state() == before


def test_async_with_keeps_the_callers_loop_running():
    async def scenario():
        ticks = 0

        async def tick():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        async with magnetar.testing.standalone() as broker:
            ticks_while_starting = ticks
            async with AsyncClient(broker.service_url, operation_timeout_seconds=10) as client:
                topic = topic_name()
                consumer = await client.subscribe(topic, "sub")
                producer = await client.create_producer(topic)
                await asyncio.gather(*(producer.send(f"{i}".encode()) for i in range(100)))
                got = [int((await consumer.receive()).data()) for _ in range(100)]
            await broker.restart_async()
            data_dir = broker.data_dir
        ticker.cancel()
        return ticks_while_starting, sorted(got), data_dir

    ticks, got, data_dir = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert ticks > 0, "the loop stood still while the broker started"
    assert got == list(range(100))
    assert not data_dir.exists()
    assert not broker_threads()


def test_cancelled_while_starting_leaves_nothing_running():
    async def scenario():
        broker = magnetar.testing.standalone()
        entering = asyncio.create_task(broker.__aenter__())
        # cancel once the broker's thread exists: its start is under way
        while not broker_threads() and not entering.done():
            await asyncio.sleep(0)
        entering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await entering
        return broker

    broker = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert wait_for(lambda: not broker_threads(), 10), "the broker went on running"
    assert not broker.running
    assert not broker.data_dir.exists()


def test_brokers_a_program_forgot_are_closed_when_it_exits(tmp_path):
    program = tmp_path / "forgetful.py"
    program.write_text(
        "import magnetar.testing\n"
        "in_thread = magnetar.testing.standalone().start()\n"
        "in_child = magnetar.testing.standalone(subprocess=True).start()\n"
        "print(in_thread.data_dir, in_child.data_dir, in_child.pid, in_thread.service_url)\n")
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120, check=True)
    thread_dir, child_dir, pid, url = done.stdout.split()
    assert not Path(thread_dir).exists() and not Path(child_dir).exists()
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert refuses_connections(url)
