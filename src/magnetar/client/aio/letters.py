"""Dead-letter and retry-letter topics of one subscription, named as the Java client names them.

`<topic>-<subscription>-DLQ` receives a message after `max_redeliver_count` redeliveries
(negative acks or ack timeouts) instead of a further redelivery; `<topic>-<subscription>-RETRY`
receives what `reconsume_later` sends back with a delay, until it has been reconsumed
`max_redeliver_count` times, after which it goes to the dead-letter topic too. Letters carry
the Java client's properties (REAL_TOPIC, ORIGIN_MESSAGE_ID, RECONSUMETIMES, DELAY_TIME,
RETRY_TOPIC) beside the message's own, and its keys as its producer wrote them (a key of
bytes keeps its base64 flag, a null key stays null, the ordering key goes along; the event
time does not, as neither Pulsar client carries it); they are written with the consumer's
schema, as Pulsar's clients write them. The original is acknowledged only once its letter
is stored. Producers are created on first use, by the factory the client gives
(a letter producer is an ordinary one, closed with the client), and shared by a
subscription's partitions.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar.client.message import Message
from magnetar.client.topic_name import base_topic_name


@dataclass(slots=True)
class DeadLetterPolicy:
    """As `pulsar.ConsumerDeadLetterPolicy`, plus the retry-letter topic of the Java client."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None
    initial_subscription_name: str | None = None
    retry_letter_topic: str | None = None


class LetterProducer(Protocol):
    """What Letters use of a producer."""

    async def send_encoded(self, content: bytes | None, **kwargs: Any) -> Any: ...
    async def close(self) -> None: ...


ProducerFactory = Callable[[str, str | None], Awaitable[LetterProducer]]
"""(topic, initial subscription name or None) -> a started producer of that topic."""


class Letters:
    def __init__(self, create_producer: ProducerFactory, topic: str, subscription: str,
                 policy: DeadLetterPolicy) -> None:
        self._create_producer = create_producer
        self.policy = policy
        base = base_topic_name(topic)
        self.dead_letter_topic = policy.dead_letter_topic or f"{base}-{subscription}-DLQ"
        self.retry_letter_topic = policy.retry_letter_topic or f"{base}-{subscription}-RETRY"
        self._producers: dict[str, LetterProducer] = {}
        self._creating: dict[str, asyncio.Future[LetterProducer]] = {}

    async def _producer(self, topic: str) -> LetterProducer:
        producer = self._producers.get(topic)
        if producer is not None:
            return producer
        task = self._creating.get(topic)
        if task is None:
            subscription = self.policy.initial_subscription_name if topic == self.dead_letter_topic else None
            task = self._creating[topic] = asyncio.ensure_future(self._create_producer(topic, subscription))
        try:
            producer = self._producers[topic] = await asyncio.shield(task)
        finally:
            self._creating.pop(topic, None)
        return producer

    @staticmethod
    def _origin(message: Message) -> dict[str, str]:
        properties = message.properties()
        if "REAL_TOPIC" not in properties:
            properties["REAL_TOPIC"] = message.topic_name()
            properties["ORIGIN_MESSAGE_ID"] = str(message.message_id())
        return properties

    async def dead_letter(self, messages: list[Message], ack: Callable[[Message], None]) -> None:
        producer = await self._producer(self.dead_letter_topic)
        for message in messages:
            await producer.send_encoded(_content(message), properties=self._origin(message), **message.key_options())
            ack(message)

    async def reconsume_later(self, message: Message, delay_ms: int, properties: dict[str, str] | None,
                              ack: Callable[[Message], None]) -> None:
        letter = {**self._origin(message), **(properties or {})}
        times = int(letter.get("RECONSUMETIMES", "0")) + 1
        letter["RECONSUMETIMES"] = str(times)
        letter["DELAY_TIME"] = str(delay_ms)
        letter["RETRY_TOPIC"] = self.retry_letter_topic
        keys = message.key_options()
        if times > self.policy.max_redeliver_count:
            producer = await self._producer(self.dead_letter_topic)
            await producer.send_encoded(_content(message), properties=letter, **keys)
        else:
            producer = await self._producer(self.retry_letter_topic)
            await producer.send_encoded(_content(message), properties=letter, deliver_after=delay_ms, **keys)
        ack(message)

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self._producers.values()), return_exceptions=True)


def _content(message: Message) -> bytes | None:
    """A letter's payload: the message's bytes as they were written (None for a null value)."""
    return None if message.has_null_value() else message.data()
