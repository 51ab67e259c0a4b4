"""What a consumer is configured with: the official `subscribe` arguments a single-partition
consumer needs, and the receiver queue it fills.

Kept apart from the consumer so the objects it owns (intake, redelivery) can name it
without importing the consumer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.client.aio.letters import DeadLetterPolicy
from magnetar.client.aio.receive_queue import AsyncReceiveQueue, ThreadReceiveQueue
from magnetar.client.enums import ConsumerCryptoFailureAction, ConsumerType, InitialPosition
from magnetar.client.message_id import MessageId
from magnetar.formats.processor import ProcessorSet

if TYPE_CHECKING:
    from magnetar.client.crypto.key_reader import CryptoKeyReader
    from magnetar.client.schema import Schema

ReceiveQueue = AsyncReceiveQueue | ThreadReceiveQueue


@dataclass(slots=True)
class ConsumerConfig:
    consumer_type: int = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    negative_ack_redelivery_delay_ms: int = 60000
    is_read_compacted: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    subscription_properties: Mapping[str, str] = field(default_factory=dict)
    initial_position: int = InitialPosition.Latest
    start_message_id_inclusive: bool = False
    batch_index_ack_enabled: bool = False
    replicate_subscription_state_enabled: bool = False
    max_pending_chunked_message: int = 10
    dead_letter_policy: DeadLetterPolicy | None = None
    key_shared_mode: int = 0
    sticky_ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order_delivery: bool = False
    durable: bool = True
    start_message_id: MessageId | None = None
    """Readers: where to start (earliest, latest or an id)."""
    payload_processors: ProcessorSet | None = None
    """PIP-96: how entries are read; None = Pulsar's format only, exactly as without processors."""
    schema: Schema | None = None
    """Decodes `Message.value()` and is registered or checked on subscribing; None: bytes."""
    crypto_key_reader: CryptoKeyReader | None = None
    """Where private keys are found to decrypt encrypted entries; None: none is decrypted."""
    crypto_failure_action: int = ConsumerCryptoFailureAction.FAIL
    columnar: bool = False
    """Set by the first receive_arrow(): entries are queued raw, for columns."""
