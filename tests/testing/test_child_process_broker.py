"""magnetar.testing.standalone(subprocess=True): `magnetar standalone` as a child process,
which a test can SIGKILL and start again on the same data."""

from __future__ import annotations

import os

import pytest
from admin_http import get_json
from broker_checks import consume_all, official_client, produce, refuses_connections, topic_name

import magnetar.testing
from magnetar.broker.config import ConfigError


def test_kill_then_restart_keeps_every_receipted_message():
    with magnetar.testing.standalone({"brokerDeduplicationEnabled": True}, subprocess=True) as broker:
        assert get_json(f"{broker.admin_url}/admin/v2/brokers/configuration/runtime")[
            "brokerDeduplicationEnabled"] == "true"
        urls, pid = (broker.service_url, broker.admin_url), broker.pid
        client = official_client(broker)
        topic = topic_name()
        consumer = client.subscribe(topic, "sub")
        sent = produce(client, topic, 300)  # flushed: every one receipted
        broker.kill()
        assert broker.pid is None and not broker.running
        broker.restart()
        assert (broker.service_url, broker.admin_url) == urls and broker.pid != pid
        assert consume_all(consumer, sent) == set(sent)
        client.close()
        assert "accepting connections" in broker.log()
        temp_dir = os.path.dirname(broker.log_path)
    assert not os.path.exists(temp_dir)
    assert refuses_connections(urls[0]) and refuses_connections(urls[1])


def test_a_bad_key_is_refused_before_a_process_starts():
    broker = magnetar.testing.standalone({"brokerServicePortt": 0}, subprocess=True)
    with pytest.raises(ConfigError, match=r"brokerServicePortt.*did you mean brokerServicePort"), broker:
        pass
    assert broker.pid is None


def test_the_environment_does_not_configure_it(monkeypatch):
    monkeypatch.setenv("PULSAR_PREFIX_maxMessageSize", "1234")
    with magnetar.testing.standalone(subprocess=True) as broker:
        runtime = get_json(f"{broker.admin_url}/admin/v2/brokers/configuration/runtime")
        assert runtime["maxMessageSize"] == str(5 * 1024 * 1024)


def test_a_broker_that_died_fails_its_stop():
    broker = magnetar.testing.standalone(subprocess=True).start()
    try:
        os.kill(broker.pid, 9)
        with pytest.raises(RuntimeError, match="did not stop cleanly"):
            broker.stop()
    finally:
        broker.close()
