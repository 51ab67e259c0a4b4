"""The pytest plugin as a user meets it: a project's own test files, run by pytest (pytester),
finding the fixtures through the `pytest11` entry point with nothing declared."""

from __future__ import annotations

import pytest

USER_TESTS = """
import uuid
from pathlib import Path

import pulsar

SEEN = []


def test_round_trip(pulsar_client, pulsar_broker):
    assert isinstance(pulsar_client, pulsar.Client)
    topic = f"persistent://public/default/t-{uuid.uuid4().hex}"
    consumer = pulsar_client.subscribe(topic, "sub")
    producer = pulsar_client.create_producer(topic)
    for i in range(100):
        producer.send_async(str(i).encode(), None, partition_key=f"k{i % 5}")
    producer.flush()
    assert sorted(int(consumer.receive(10_000).data()) for _ in range(100)) == list(range(100))
    SEEN.append((pulsar_broker.service_url, pulsar_broker.data_dir))


def test_same_broker_again(pulsar_broker):
    SEEN.append((pulsar_broker.service_url, pulsar_broker.data_dir))
    assert SEEN[0] == SEEN[1], "one broker for the session"


def test_own_brokers(pulsar_broker_factory, pulsar_broker):
    first = pulsar_broker_factory({"brokerDeduplicationEnabled": True})
    second = pulsar_broker_factory(subprocess=True)
    assert len({first.service_url, second.service_url, pulsar_broker.service_url}) == 3
    SEEN.extend([first.data_dir, second.data_dir])


def test_own_brokers_are_gone():
    assert not any(path.exists() for path in SEEN[2:])
"""


def test_fixtures_come_from_the_entry_point(pytester: pytest.Pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    pytester.makepyfile(test_user_later="""
        from test_user import SEEN

        def test_broker_closed_after_the_session_only(pulsar_broker):
            assert pulsar_broker.data_dir == SEEN[0][1] and pulsar_broker.data_dir.exists()
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)


def override_config(pytester: pytest.Pytester, config: str) -> None:
    """A user's conftest.py setting the session broker's configuration to `config` (Python source)."""
    pytester.makeconftest(f"""
        import pytest

        @pytest.fixture(scope="session")
        def pulsar_broker_config():
            return {config}
    """)


def test_the_session_broker_is_configured_by_overriding_its_config_fixture(pytester: pytest.Pytester):
    override_config(pytester, '{"allowAutoTopicCreation": False}')
    pytester.makepyfile("""
        import pulsar
        import pytest

        def test_no_auto_creation(pulsar_client):
            with pytest.raises(pulsar.TopicNotFound):
                pulsar_client.create_producer("not-created")
    """)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_bad_key_fails_the_tests_that_need_the_broker_naming_it(pytester: pytest.Pytester):
    override_config(pytester, '{"brokerDeleteInactiveTopicsEnable": False}')
    pytester.makepyfile("""
        def test_uses_it(pulsar_broker):
            pass

        def test_does_not():
            pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*ConfigError*brokerDeleteInactiveTopicsEnable*did you mean*"])


def test_without_the_official_client_pulsar_client_is_magnetars(pytester: pytest.Pytester):
    pytester.makeconftest("""
        import sys

        sys.modules["pulsar"] = None  # as if pulsar-client were not installed
    """)
    pytester.makepyfile("""
        import magnetar.client

        def test_client(pulsar_client):
            assert isinstance(pulsar_client, magnetar.client.Client)
            producer = pulsar_client.create_producer("persistent://public/default/t")
            consumer = pulsar_client.subscribe("persistent://public/default/t", "s")
            producer.send(b"x")
            assert consumer.receive(10_000).data() == b"x"
    """)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_run_that_uses_no_fixture_imports_no_broker(pytester: pytest.Pytester):
    pytester.makepyfile("""
        import sys

        def test_nothing_loaded():
            assert "magnetar.testing.pytest_plugin" in sys.modules
            assert not [name for name in sys.modules if name.startswith(("magnetar.broker", "magnetar.testing."))
                        and name != "magnetar.testing.pytest_plugin"]
            assert "asyncio" not in sys.modules
    """)
    # pytest-asyncio's and anyio's plugins (anyio arrives with httpx) import asyncio themselves
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio", "-p", "no:anyio").assert_outcomes(
        passed=1)

