"""Every argument of the official client's `Client(...)`, `create_producer`, `subscribe` and
`create_reader` either works in magnetar.client as it does there, or is refused naming it:
the ones that work are run against both clients, the refused ones against magnetar's."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid

import pulsar
import pytest
from admin_http import get_json, http
from polling import wait_for

import magnetar.client
from magnetar.client import errors
from magnetar.client.aio import Client as AsyncClient


def _create_partitioned(broker, topic: str, partitions: int) -> None:
    path = topic.removeprefix("persistent://")
    status, _, body = http("PUT", f"{broker.admin_url}/admin/v2/persistent/{path}/partitions", str(partitions).encode())
    assert status == 204, body


def _consumer_permits(broker, topic: str, subscription: str) -> list[int] | None:
    status, _, _ = http("GET", f"{broker.admin_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    if status != 200:
        return None
    stats = get_json(f"{broker.admin_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")
    consumers = stats["subscriptions"].get(subscription, {}).get("consumers", [])  # type: ignore[index]
    return [c["availablePermits"] for c in consumers] or None


# -- what works in both


@pytest.mark.parametrize(("policy", "batches"), [
    ((3, -1, 500), [3, 2, 0]),  # a count: full batches at once, the rest at the timeout
    ((-1, 100, 500), [2, 2, 1]),  # 40-byte messages: a third would pass 100 bytes and waits its turn
    ((-1, -1, 300), [5, 0]),  # no limit: what arrived by the timeout
])
def test_batch_receive_policy(api, topic, policy, batches):
    client = api.client()
    consumer = client.subscribe(topic, "s", batch_receive_policy=api.module.ConsumerBatchReceivePolicy(*policy))
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"x" * 40)
    got = [consumer.batch_receive() for _ in batches]
    assert [len(batch) for batch in got] == batches
    assert len({m.message_id().serialize() for batch in got for m in batch}) == 5
    for batch in got:
        for message in batch:
            consumer.acknowledge(message)


REGEX_MODES = {"PersistentOnly": {"persistent"}, "NonPersistentOnly": {"non-persistent"},
               "AllTopics": {"persistent", "non-persistent"}}


@pytest.mark.parametrize("mode", list(REGEX_MODES))
def test_regex_subscription_mode_picks_the_domains(api, shared_broker, mode):
    client = api.client()
    prefix = f"rx-{uuid.uuid4().hex[:8]}"
    topics = {domain: f"{domain}://public/default/{prefix}-{domain}" for domain in ("persistent", "non-persistent")}
    producers = {domain: client.create_producer(name) for domain, name in topics.items()}  # listed while active
    consumer = client.subscribe(re.compile(f"public/default/{prefix}-.*"), "rx",
                                regex_subscription_mode=getattr(api.module.RegexSubscriptionMode, mode))
    for domain, producer in producers.items():
        producer.send(domain.encode())
    expected = REGEX_MODES[mode]
    got = [consumer.receive(10_000) for _ in expected]
    assert {m.data().decode() for m in got} == expected
    assert {m.topic_name() for m in got} == {topics[domain] for domain in expected}
    for domain, name in topics.items():  # the other domain's topic got no subscription
        domain_path = name.replace("://", "/", 1)
        stats = get_json(f"{shared_broker.admin_url}/admin/v2/{domain_path}/stats")
        assert ("rx" in stats["subscriptions"]) == (domain in expected), (domain, stats)  # type: ignore[index]


@pytest.mark.parametrize(("total", "each"), [(40, 10), (2, 1)])
def test_max_total_receiver_queue_size_is_shared_by_the_partitions(api, shared_broker, topic, total, each):
    _create_partitioned(shared_broker, topic, 4)
    client = api.client()
    client.subscribe(topic, "q", receiver_queue_size=100, max_total_receiver_queue_size_across_partitions=total)
    partitions = [f"{topic}-partition-{i}" for i in range(4)]
    assert wait_for(lambda: all(_consumer_permits(shared_broker, p, "q") for p in partitions))
    assert [_consumer_permits(shared_broker, p, "q") for p in partitions] == [[each]] * 4


def test_max_pending_messages_across_partitions_is_shared_by_the_partitions(api, shared_broker, topic):
    """8 across 4 partitions: 2 pending on the one partition used, whatever max_pending_messages says
    (batched for a minute, so they stay pending until the flush)."""
    _create_partitioned(shared_broker, topic, 4)
    client = api.client()
    producer = client.create_producer(
        topic, max_pending_messages=1000, max_pending_messages_across_partitions=8, batching_enabled=True,
        batching_max_publish_delay_ms=60_000, message_routing_mode=api.module.PartitionsRoutingMode.UseSinglePartition)
    results: list = []
    for _ in range(5):
        producer.send_async(b"x", lambda result, _id: results.append(result))
    producer.flush()
    assert wait_for(lambda: len(results) == 5)
    assert sorted(results, key=int) == sorted([api.module.Result.Ok] * 2 + [api.module.Result.ProducerQueueIsFull] * 3,
                                              key=int)


@pytest.mark.parametrize("limit", [1, 3])
def test_concurrent_lookup_requests_refuses_lookups_past_it_at_once(api, limit):
    client = api.client(concurrent_lookup_requests=limit)
    topics = [f"lookups-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    if limit >= len(topics):
        client.subscribe(topics, "s").close()
    else:
        with pytest.raises(api.module.TooManyLookupRequestException):
            client.subscribe(topics, "s")


# -- what magnetar.client refuses rather than ignore


@pytest.mark.parametrize(("where", "kwargs"), [
    ("client", {"io_threads": 4}),
    ("client", {"message_listener_threads": 2}),
    ("client", {"log_conf_file_path": "/etc/log4cxx.conf"}),
    ("client", {"logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)}),
    ("client", {"stats_interval_in_seconds": 60}),
    ("client", {"use_tls": True}),
    ("client", {"tls_certificate_file_path": "/tmp/client.pem"}),
    ("client", {"concurrent_lookup_requests": 0}),
    ("subscribe", {"broker_consumer_stats_cache_time_ms": 1000}),
    ("subscribe", {"auto_ack_oldest_chunked_message_on_queue_full": True}),
    ("subscribe", {"regex_subscription_mode": 7}),
    ("subscribe", {"batch_receive_policy": "ten at a time"}),
    ("subscribe", {"max_total_receiver_queue_size_across_partitions": -1}),
    ("producer", {"lazy_start_partitioned_producers": True}),
    ("producer", {"max_pending_messages_across_partitions": "many"}),
])
def test_an_option_magnetar_cannot_honour_is_refused_naming_it(shared_broker, topic, where, kwargs):
    (name,) = kwargs
    with pytest.raises(errors.InvalidConfiguration, match=re.escape(name.split("_file_path")[0])):
        client = magnetar.client.Client(shared_broker.service_url, **(kwargs if where == "client" else {}))
        try:
            if where == "subscribe":
                client.subscribe(topic, "s", **kwargs)
            elif where == "producer":
                client.create_producer(topic, **kwargs)
        finally:
            client.close()


def test_the_defaults_of_refused_options_are_taken(shared_broker, topic):
    client = magnetar.client.Client(shared_broker.service_url, io_threads=1, message_listener_threads=1,
                                    log_conf_file_path=None, logger=None, stats_interval_in_seconds=0, use_tls=False)
    try:
        client.subscribe(topic, "s", broker_consumer_stats_cache_time_ms=30000,
                         auto_ack_oldest_chunked_message_on_queue_full=False).close()
        client.create_producer(topic, lazy_start_partitioned_producers=False).close()
    finally:
        client.close()


def test_concurrent_lookups_in_the_asyncio_client(shared_broker):
    """Exactly the lookups past the limit fail: each takes its place before it waits."""

    async def run() -> list[object]:
        async with AsyncClient(shared_broker.service_url, concurrent_lookup_requests=2) as client:
            names = [f"aio-lookups-{uuid.uuid4().hex[:8]}-{i}" for i in range(5)]
            return await asyncio.gather(*(client.get_topic_partitions(n) for n in names), return_exceptions=True)

    results = asyncio.run(run())
    assert sum(isinstance(r, errors.TooManyLookupRequestException) for r in results) == 3
    assert sum(isinstance(r, list) for r in results) == 2


def test_a_logging_logger_gets_the_clients_records(shared_broker, topic):
    """The official client takes a Python `logging.Logger` and logs there: so does magnetar's
    (a broker's unload makes the producer log its reconnection)."""
    seen: list[logging.LogRecord] = []
    target = logging.getLogger(f"app-{uuid.uuid4().hex}")
    target.setLevel(logging.INFO)
    target.propagate = False
    target.addHandler(type("Keep", (logging.Handler,), {"emit": lambda self, record: seen.append(record)})())
    ours = logging.getLogger("magnetar.client")
    saved = ours.handlers[:], ours.level, ours.propagate
    client = magnetar.client.Client(shared_broker.service_url, logger=target)
    try:
        client.create_producer(topic).send(b"x")
        status, _, body = http("PUT", f"{shared_broker.admin_url}/admin/v2/persistent/"
                                      f"{topic.removeprefix('persistent://')}/unload")
        assert status == 204, body
        assert wait_for(lambda: any("reconnecting" in record.getMessage() for record in seen))
        assert all(record.name.startswith("magnetar.client") for record in seen)
    finally:
        client.close()
        ours.handlers[:], ours.level, ours.propagate = saved
