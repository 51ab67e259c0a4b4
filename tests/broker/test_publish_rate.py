"""Publish rate limits (the `publishRate` policy of a namespace or a topic): producers of a
topic over its rate are slowed, never refused, and nothing they send is lost; a topic
without a limit, on another connection, is not slowed; the topic's policy overrides the
namespace's and removing the policies lifts them. Both clients, default options (batching
on) but for a bounded queue (`max_pending_messages`), so that a flush at the end waits a
fraction of a second, not the whole queue's worth of the rate.

Rates are compared with generous bands: what a producer gets stored in `elapsed` seconds is
at most 1.5 x rate x elapsed plus a burst (one second of the rate, the bucket, and one
queue of messages read before the connection paused); unlimited, it is many times more."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from admin_http import http

RATE = 200
PENDING = 100
BURST = RATE + PENDING
SECONDS = 2.0


def _rest(broker, method: str, path: str, body: object = None) -> tuple[int, object]:
    status, _, answer = http(method, f"{broker.admin_url}/admin/v2/{path}",
                             None if body is None else json.dumps(body).encode())
    return status, json.loads(answer) if answer else None


def _set(broker, method: str, path: str, body: object = None) -> None:
    status, answer = _rest(broker, method, path, body)
    assert status in (200, 204), (method, path, status, answer)


def _namespace(broker) -> str:
    namespace = f"public/rate-{uuid.uuid4().hex[:8]}"
    _set(broker, "PUT", f"namespaces/{namespace}", {})
    return namespace


def _rate(messages: int, size: int = -1) -> dict[str, int]:
    return {"publishThrottlingRateInMsg": messages, "publishThrottlingRateInByte": size}


def _produce_for(client, topic: str, seconds: float, **options) -> tuple[int, float]:
    """Send as fast as the producer takes messages for `seconds`, then flush: (messages
    stored, seconds taken). Every send must be receipted: nothing is refused or lost."""
    options.setdefault("max_pending_messages", PENDING)
    producer = client.create_producer(topic, block_if_queue_full=True, **options)
    results: list = []
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        producer.send_async(b"m%d" % sent, lambda result, _id: results.append(result))
        sent += 1
    producer.flush()
    elapsed = time.monotonic() - start
    producer.close()
    assert len(results) == sent and {r.name for r in results} == {"Ok"}, (sent, len(results), set(results))
    return sent, elapsed


def _assert_limited(stored: int, elapsed: float, rate: int = RATE) -> None:
    assert stored <= 1.5 * rate * elapsed + BURST, (stored, elapsed)
    assert stored >= 0.5 * rate * elapsed, (stored, elapsed)  # slowed, not stalled


def _assert_unlimited(stored: int, elapsed: float, rate: int = RATE) -> None:
    assert stored > 3 * (1.5 * rate * elapsed + BURST), (stored, elapsed)


def test_a_namespace_rate_slows_its_producers_and_no_other(module_broker, api) -> None:
    _, make = api
    limited_ns, free_ns = _namespace(module_broker), _namespace(module_broker)
    _set(module_broker, "POST", f"namespaces/{limited_ns}/publishRate", _rate(RATE))
    topic = f"persistent://{limited_ns}/t"
    consumer = make(module_broker.url).subscribe(topic, "all")
    free: list[tuple[int, float]] = []
    # another client: another connection, which the throttled one must not hold back
    other = threading.Thread(target=lambda: free.append(
        _produce_for(make(module_broker.url), f"persistent://{free_ns}/t", SECONDS)))
    other.start()
    stored, elapsed = _produce_for(make(module_broker.url), topic, SECONDS)
    other.join()
    _assert_limited(stored, elapsed)
    _assert_unlimited(*free[0])
    for _ in range(stored):  # every message stored, once
        consumer.acknowledge(consumer.receive(10_000))


def test_sends_read_but_not_handled_wait_for_the_throttle_too(module_broker, api) -> None:
    """Unbatched, a thousand SENDs in flight: one socket read holds more than a turn handles
    (read_turns), and the rest waits for the throttle's end, then is stored."""
    _, make = api
    namespace, rate, pending = _namespace(module_broker), 1000, 1000
    _set(module_broker, "POST", f"namespaces/{namespace}/publishRate", _rate(rate))
    stored, elapsed = _produce_for(make(module_broker.url), f"persistent://{namespace}/t", 1.5,
                                   batching_enabled=False, max_pending_messages=pending)
    assert stored <= 1.5 * rate * elapsed + rate + pending, (stored, elapsed)


def test_a_throttle_longer_than_the_keepalive_keeps_the_connection(broker_factory, client_factory) -> None:
    """At 1 msg/s a batch of 4 holds the connection for 3 s, over the 1 s keep-alive: the
    unread PONG is the throttle's doing, not a dead client, and the connection stays up."""
    broker = broker_factory("keepAliveIntervalSeconds=1")
    namespace = _namespace(broker)
    _set(broker, "POST", f"namespaces/{namespace}/publishRate", _rate(1))
    producer = client_factory(broker.url).create_producer(f"persistent://{namespace}/t",
                                                           batching_max_publish_delay_ms=50)
    for i in range(4):
        producer.send_async(b"%d" % i, None)
    producer.flush()  # the batch: the bucket of 1 goes 3 messages short
    producer.send(b"after")  # waits out the throttle, then is stored on the same connection
    assert "did not answer a ping" not in broker.log()


def test_a_topic_rate_overrides_the_namespace_and_removing_lifts_them(module_broker, api) -> None:
    _, make = api
    client = make(module_broker.url)
    namespace = _namespace(module_broker)
    topic = f"persistent://{namespace}/t"
    _set(module_broker, "POST", f"namespaces/{namespace}/publishRate", _rate(RATE))
    _set(module_broker, "POST", f"persistent/{namespace}/t/publishRate", _rate(1_000_000))
    _assert_unlimited(*_produce_for(client, topic, 1.0))
    _set(module_broker, "DELETE", f"persistent/{namespace}/t/publishRate")
    _assert_limited(*_produce_for(client, topic, SECONDS))
    _set(module_broker, "DELETE", f"namespaces/{namespace}/publishRate")
    _assert_unlimited(*_produce_for(client, topic, 1.0))


def test_a_byte_rate_alone_limits_too(module_broker, client_factory) -> None:
    """-1 messages (pulsar-admin's default) is no limit on their count; the bytes still hold."""
    namespace = _namespace(module_broker)
    _set(module_broker, "POST", f"persistent/{namespace}/t/publishRate", _rate(-1, RATE * 100))
    stored, elapsed = _produce_for(client_factory(module_broker.url), f"persistent://{namespace}/t", SECONDS)
    # a message is about 100 bytes as the rate counts them (its metadata and a short payload)
    assert stored <= 1.5 * RATE * 4 * elapsed + 4 * BURST, (stored, elapsed)


@pytest.mark.parametrize("level", ["namespaces/{ns}", "persistent/{ns}/t"])
def test_the_rest_api_checks_and_answers_publish_rates(module_broker, level: str) -> None:
    namespace = _namespace(module_broker)
    path = level.format(ns=namespace) + "/publishRate"
    assert _rest(module_broker, "GET", path) == (200, None)
    for bad in (_rate(-2), _rate(10, -5), _rate("10"), _rate(1.5), _rate(True), _rate(2**31), [10], 10):
        status, answer = _rest(module_broker, "POST", path, bad)
        assert status == 412 and "publishRate" in answer["reason"], (bad, status, answer)
    assert _rest(module_broker, "GET", path) == (200, None)
    _set(module_broker, "POST", path, {"publishThrottlingRateInMsg": 10})
    assert _rest(module_broker, "GET", path) == (200, _rate(10, -1))
    _set(module_broker, "DELETE", path)
    assert _rest(module_broker, "GET", path) == (200, None)
