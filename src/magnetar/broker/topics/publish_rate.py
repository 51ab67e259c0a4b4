"""Publish rate limits (Pulsar's `publishRate` policy): how many messages and bytes a topic
takes per second from all its producers, Pulsar and Kafka alike.

The policy is set on a topic, else its namespace (`publishMaxMessageRate`), else the
broker's `maxPublishRatePerTopicInMessages` / `maxPublishRatePerTopicInBytes`; a rate of 0
or below is no limit, so a value of -1 (pulsar-admin's default for a flag not given) lifts
that half. The limit is a token bucket per topic, one second of the rate deep: what was
published is counted after it is taken, and once the bucket runs dry the producers are
slowed, never refused: a Pulsar connection stops reading (the client's sends wait in its
socket and its queue) and a Kafka produce answer is held back, each for as long as the
bucket needs to refill. Nothing is lost, and a topic without a limit costs one attribute
test per SEND.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.policies.topic_policies import Policy

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_topic import AbstractTopic

#: Pulsar's names: the topic policy, the namespace `Policies` field (Pulsar keeps one rate a
#: cluster there; a standalone has one cluster, so magnetar keeps the one rate). Its broker
#: defaults are two keys, read by `configured_rate`.
PUBLISH_RATE = Policy("publishRate", "publishMaxMessageRate", "")
MESSAGES, BYTES = "publishThrottlingRateInMsg", "publishThrottlingRateInByte"

Rate = tuple[float, float]
"""(messages, bytes) a second, fractions allowed (a replicator dispatch rate over a period); 0 is no limit."""


class PublishRateLimiter:
    """Two token buckets (messages, bytes), each holding at most one second of its rate."""

    __slots__ = ("_at", "_bytes", "_messages", "rate")

    def __init__(self, rate: Rate) -> None:
        self.rate = rate
        self._messages, self._bytes = float(rate[0]), float(rate[1])
        self._at = time.monotonic()

    def consume(self, messages: int, size: int) -> float:
        """Count what was just published; the seconds its producers must wait (0: none)."""
        now = time.monotonic()
        elapsed, self._at = now - self._at, now
        per_message, per_byte = self.rate
        wait = 0.0
        if per_message > 0:
            self._messages = min(self._messages + elapsed * per_message, per_message) - messages
            wait = max(wait, -self._messages / per_message)
        if per_byte > 0:
            self._bytes = min(self._bytes + elapsed * per_byte, per_byte) - size
            wait = max(wait, -self._bytes / per_byte)
        return wait


def configured_rate(topic: AbstractTopic) -> Rate:
    """The rate in effect: the topic's policy, else its namespace's, else the broker's keys."""
    value: Any = topic.context.policies.configured(topic.name, PUBLISH_RATE)
    if value is None:
        config = topic.context.config
        return max(config.maxPublishRatePerTopicInMessages, 0), max(config.maxPublishRatePerTopicInBytes, 0)
    return max(int(value.get(MESSAGES, -1)), 0), max(int(value.get(BYTES, -1)), 0)


def publish_limiter(topic: AbstractTopic) -> PublishRateLimiter | None:
    """The topic's limiter, None without a limit. A limiter whose rate did not change is
    kept: any policy's change re-reads this one, and must not refill the bucket."""
    rate = configured_rate(topic)
    current = topic.publish_limiter
    if rate == (0, 0):
        topic.publish_limiter = None
    elif current is None or current.rate != rate:
        topic.publish_limiter = PublishRateLimiter(rate)
    return topic.publish_limiter


def hold_for(current: asyncio.TimerHandle | None, seconds: float,
             release: Callable[[], None]) -> asyncio.TimerHandle:
    """The timer of a connection held `seconds` from now (its reads paused by a Pulsar
    connection, its requests by a Kafka one): `current`, if it already runs as long, else
    one replacing it. `release` ends the hold."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    if current is not None:
        if current.when() >= until:
            return current
        current.cancel()
    return loop.call_at(until, release)
