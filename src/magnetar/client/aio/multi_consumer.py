"""A consumer of several topics: a list, a pattern, or the partitions of a partitioned topic.

One single-topic consumer per topic partition, all filling one receiver queue. Acks go
back to the consumer that received the message (the message, or its id's topic, says which).
A pattern consumer lists its namespace again every `pattern_auto_discovery_period` seconds
and subscribes to new matching topics (the official client strips `-partition-N`,
de-duplicates, filters with the regex and looks up partitions the same way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.aio.consumer import Consumer
from magnetar.client.aio.consumer_config import ConsumerConfig, ReceiveQueue
from magnetar.client.aio.letters import Letters
from magnetar.client.aio.receive_queue import AsyncReceiveQueue
from magnetar.client.aio.receiver import Receiver, Receiving
from magnetar.client.enums import RegexSubscriptionMode
from magnetar.client.message_id import MessageId, as_message_id
from magnetar.client.topic_name import base_topic_name, full_topic_name, namespace_of, partition_name
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.aio.context import ClientContext

log = logging.getLogger(__name__)
_MODES = {RegexSubscriptionMode.PersistentOnly: pb.CommandGetTopicsOfNamespace.PERSISTENT,
          RegexSubscriptionMode.NonPersistentOnly: pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
          RegexSubscriptionMode.AllTopics: pb.CommandGetTopicsOfNamespace.ALL}


def _local(name: str) -> str:
    """A topic name (or pattern) without its `persistent://` or `non-persistent://`."""
    return name.split("://", 1)[1] if "://" in name else name


class MultiTopicsConsumer(Receiving):
    def __init__(self, context: ClientContext, topics: list[str], subscription: str, config: ConsumerConfig,
                 queue: ReceiveQueue | None = None, pattern: re.Pattern[str] | None = None,
                 discovery_period: float = 60.0, letters: Letters | None = None) -> None:
        self.context = context
        self.letters = letters
        self.topics = [full_topic_name(t) for t in topics]
        self.topic = pattern.pattern if pattern is not None else ",".join(self.topics)
        self.subscription = subscription
        self.config = config
        self.queue: ReceiveQueue = queue if queue is not None else AsyncReceiveQueue()
        self.pattern = pattern
        self.discovery_period = discovery_period
        self.consumers: dict[str, Consumer] = {}
        self.closed = False
        self._discovery: asyncio.Task[None] | None = None
        self._own(Receiver(self.queue, self.topic, config, self.consumers.__getitem__))

    async def start(self) -> None:
        try:
            if self.pattern is not None:
                self.topics = await self._matching_topics()
            await self._subscribe_all(self.topics)
        except BaseException:
            await self.close()
            raise
        if self.pattern is not None:
            self._discovery = asyncio.get_running_loop().create_task(self._discover())

    async def _matching_topics(self) -> list[str]:
        """The namespace's topics of the domains `regex_subscription_mode` names whose names
        match the pattern, both without their domain (as the official client matches them)."""
        assert self.pattern is not None
        without_domain = re.compile(_local(self.pattern.pattern), self.pattern.flags)
        names = await self.context.lookup.topics_of_namespace(namespace_of(without_domain.pattern),
                                                             _MODES[self.config.regex_subscription_mode])
        bases = sorted({base_topic_name(name) for name in names})
        return [name for name in bases if without_domain.fullmatch(_local(name))]

    async def _subscribe_all(self, topics: list[str]) -> None:
        partitions = await asyncio.gather(*(self.context.lookup.partitions(t) for t in topics))
        consumers = []
        for topic, count in zip(topics, partitions, strict=True):
            names = [(topic, -1)] if count == 0 else [(partition_name(topic, i), i) for i in range(count)]
            share = min(self.config.receiver_queue_size,
                        self.config.max_total_receiver_queue_size_across_partitions // len(names))
            for name, index in names:
                if name not in self.consumers:
                    consumer = Consumer(self.context, name, self.subscription, self.config, self.queue, index,
                                        self.letters, queue_size=share)
                    self.consumers[name] = consumer
                    consumers.append(consumer)
        results = await asyncio.gather(*(c.start() for c in consumers), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            raise failure

    async def _discover(self) -> None:
        while not self.closed:
            await asyncio.sleep(self.discovery_period)
            try:
                topics = await self._matching_topics()
                new = [t for t in topics if t not in self.topics]
                if new:
                    self.topics += new
                    await self._subscribe_all(new)
            except errors.PulsarException as exc:
                log.info("pattern discovery on %s: %s", self.topic, exc)

    # -- the consumer API, routed to the partition's consumer
    def _owner(self, message: Any) -> Consumer:
        ctx = getattr(message, "_ctx", None)
        if ctx is not None:
            return ctx.owner
        mid = as_message_id(message)
        topic = mid.topic_name()
        consumer = self.consumers.get(topic) if topic else None
        if consumer is None:
            if len(self.consumers) == 1:
                return next(iter(self.consumers.values()))
            raise errors.OperationNotSupported("a message id without its topic cannot be routed (deserialize it "
                                               "with topic=)")
        return consumer

    def acknowledge(self, message: Any, txn: Any = None) -> asyncio.Future[None] | None:
        return self._owner(message).acknowledge(message, txn)

    def acknowledge_cumulative(self, message: Any) -> None:
        self._owner(message).acknowledge_cumulative(message)

    def negative_acknowledge(self, message: Any) -> None:
        self._owner(message).negative_acknowledge(message)

    async def reconsume_later(self, message: Any, delay_ms: int, properties: dict[str, str] | None = None) -> None:
        await self._owner(message).reconsume_later(message, delay_ms, properties)

    def redeliver_unacknowledged_messages(self) -> None:
        for consumer in self.consumers.values():
            consumer.redeliver_unacknowledged_messages()

    async def seek(self, target: Any) -> None:
        if not isinstance(target, int):
            raise errors.OperationNotSupported("seek by message id is per partition; seek by time works here")
        await asyncio.gather(*(c.seek(target) for c in self.consumers.values()))

    async def has_message_available(self) -> bool:
        if len(self.queue):
            return True
        results = await asyncio.gather(*(c.has_message_available() for c in self.consumers.values()))
        return any(results)

    async def get_last_message_id(self) -> MessageId:
        raise errors.OperationNotSupported("get_last_message_id is per partition")

    def subscription_name(self) -> str:
        return self.subscription

    def consumer_name(self) -> str:
        return self.config.consumer_name or ""

    def is_connected(self) -> bool:
        return all(c.is_connected() for c in self.consumers.values())

    async def unsubscribe(self) -> None:
        await asyncio.gather(*(c.unsubscribe() for c in self.consumers.values()))
        await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._receiver.close()
        if self._discovery is not None:
            self._discovery.cancel()
            with contextlib.suppress(BaseException):
                await self._discovery
        await asyncio.gather(*(c.close() for c in self.consumers.values()), return_exceptions=True)
