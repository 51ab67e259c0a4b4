"""A reader: a non-durable, exclusive subscription that starts at a message id.

It leaves nothing on the broker (the subscription goes away with the reader) and never
acknowledges. Start-id inclusiveness is client-side, as in the official client: the
broker delivers from the start entry and the reader drops what lies before it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from magnetar.client.aio.consumer import Consumer
from magnetar.client.aio.consumer_config import ConsumerConfig, ReceiveQueue
from magnetar.client.enums import ConsumerCryptoFailureAction, ConsumerType
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.formats.processor import ProcessorSet

if TYPE_CHECKING:
    from magnetar.client.aio.context import ClientContext
    from magnetar.client.crypto.key_reader import CryptoKeyReader
    from magnetar.client.schema import Schema


class Reader:
    def __init__(self, context: ClientContext, topic: str, start_message_id: MessageId, *,
                 receiver_queue_size: int = 1000, reader_name: str | None = None,
                 subscription_role_prefix: str | None = None, is_read_compacted: bool = False,
                 start_message_id_inclusive: bool = False,
                 queue: ReceiveQueue | None = None, payload_processors: ProcessorSet | None = None,
                 schema: Schema | None = None, crypto_key_reader: CryptoKeyReader | None = None,
                 crypto_failure_action: int = ConsumerCryptoFailureAction.FAIL) -> None:
        prefix = subscription_role_prefix or "reader"
        subscription = reader_name or f"{prefix}-{uuid.uuid4().hex[:10]}"
        config = ConsumerConfig(
            consumer_type=ConsumerType.Exclusive, receiver_queue_size=receiver_queue_size, consumer_name="",
            is_read_compacted=is_read_compacted, start_message_id_inclusive=start_message_id_inclusive,
            durable=False, start_message_id=start_message_id, payload_processors=payload_processors, schema=schema,
            crypto_key_reader=crypto_key_reader, crypto_failure_action=crypto_failure_action,
        )
        self.consumer = Consumer(context, topic, subscription, config, queue)

    @property
    def queue(self) -> ReceiveQueue:
        return self.consumer.queue

    async def start(self) -> None:
        await self.consumer.start()

    def topic(self) -> str:
        return self.consumer.topic

    async def read_next(self, timeout_millis: int | None = None) -> Message:
        return await self.consumer.receive(timeout_millis)

    async def read_arrow(self, max_messages: int = 10_000, timeout_millis: int | None = None) -> Any:
        """Like Consumer.receive_arrow: the next messages as one pyarrow RecordBatch."""
        return await self.consumer.receive_arrow(max_messages, timeout_millis)

    async def has_message_available(self) -> bool:
        return await self.consumer.has_message_available()

    async def seek(self, target: Any) -> None:
        await self.consumer.seek(target)

    def is_connected(self) -> bool:
        return self.consumer.is_connected()

    async def close(self) -> None:
        await self.consumer.close()

    def __aiter__(self) -> Reader:
        return self

    async def __anext__(self) -> Message:
        return await self.consumer.__anext__()
