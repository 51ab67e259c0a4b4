"""A producer of a partitioned topic: one single-partition producer per partition and a router."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.client.aio.producer import Producer, ProducerConfig
from magnetar.client.aio.routing import Router
from magnetar.client.message_id import MessageId
from magnetar.client.topic_name import partition_name

if TYPE_CHECKING:
    from magnetar.client.aio.context import ClientContext


class PartitionedProducer:
    def __init__(self, context: ClientContext, topic: str, config: ProducerConfig, partitions: int, routing_mode: int,
                 message_router: Callable[[Any, int], int] | None = None) -> None:
        self.topic = topic
        share = max(1, config.max_pending_messages_across_partitions // partitions)
        if config.max_pending_messages <= 0 or share < config.max_pending_messages:
            config = dataclasses.replace(config, max_pending_messages=share)
        self.producers = [Producer(context, partition_name(topic, i), config, partition=i) for i in range(partitions)]
        self.router = Router(routing_mode, partitions, batching=config.batching_enabled,
                             switch_ms=config.batching_max_publish_delay_ms, custom=message_router)

    async def start(self) -> None:
        results = await asyncio.gather(*(p.start() for p in self.producers), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            await self.close()
            raise failure

    def _pick(self, kwargs: dict[str, Any], content: Any) -> Producer:
        key = kwargs.get("partition_key")
        routed = _RoutedMessage(content, key, kwargs.get("properties")) if self.router.custom else None
        return self.producers[self.router.choose(key, routed)]

    def encode(self, value: Any, options: dict[str, Any]) -> tuple[bytes | None, dict[str, Any]]:
        return self.producers[0].encode(value, options)

    def send_async(self, content: Any, callback: Any, **kwargs: Any) -> None:
        content, kwargs = self.encode(content, kwargs)
        self.send_encoded_async(content, callback, **kwargs)

    def send_encoded_async(self, content: bytes | None, callback: Any, **kwargs: Any) -> None:
        self._pick(kwargs, content).send_encoded_async(content, callback, **kwargs)

    async def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Encoded first, so a key the schema writes (a SEPARATED KeyValueSchema's) routes the message."""
        content, kwargs = self.encode(content, kwargs)
        return await self.send_encoded(content, **kwargs)

    async def send_encoded(self, content: bytes | None, **kwargs: Any) -> MessageId:
        return await self._pick(kwargs, content).send_encoded(content, **kwargs)

    async def send_entry(self, payload: bytes, metadata_fields: Any = None, num_messages: int = 1) -> MessageId:
        """One entry to the partition its `partition_key` field (or the router) picks."""
        key = (metadata_fields or {}).get("partition_key")
        return await self.producers[self.router.choose(key, None)].send_entry(payload, metadata_fields, num_messages)

    async def send_arrow(self, data: Any, max_rows: int | None = None,
                         sequence_id: int | None = None) -> list[MessageId]:
        return await self.producers[self.router.choose(None, None)].send_arrow(data, max_rows, sequence_id)

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.producers))

    def flush_batch(self) -> None:
        for producer in self.producers:
            producer.flush_batch()

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.producers), return_exceptions=True)

    def producer_name(self) -> str:
        return self.producers[0].producer_name()

    def last_sequence_id(self) -> int:
        return max(p.last_sequence_id() for p in self.producers)

    def is_connected(self) -> bool:
        return all(p.is_connected() for p in self.producers)

    @property
    def closed(self) -> bool:
        return all(p.closed for p in self.producers)


class _RoutedMessage:
    """What a custom `message_router(message, num_partitions)` sees of the message."""

    __slots__ = ("_data", "_key", "_properties")

    def __init__(self, data: bytes | None, key: str | None, properties: Any) -> None:
        self._data = data
        self._key = key
        self._properties = properties

    def data(self) -> bytes:
        return self._data or b""

    def partition_key(self) -> str:
        return self._key or ""

    def properties(self) -> dict[str, str]:
        return dict(self._properties or {})
