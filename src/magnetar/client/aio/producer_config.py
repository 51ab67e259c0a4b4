"""What a producer is configured with: the official `create_producer` arguments a
single-partition producer needs (a partitioned producer gives each partition the same)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.client.enums import BatchingType, CompressionType, ProducerAccessMode

if TYPE_CHECKING:
    from magnetar.client.crypto.key_reader import CryptoKeyReader
    from magnetar.client.schema import Schema


@dataclass(slots=True)
class ProducerConfig:
    """The official `create_producer` arguments a single-partition producer needs."""

    producer_name: str | None = None
    initial_sequence_id: int | None = None
    send_timeout_millis: int = 30000
    compression_type: int = CompressionType.NONE
    max_pending_messages: int = 1000
    block_if_queue_full: bool = False
    batching_enabled: bool = False
    batching_max_messages: int = 1000
    batching_max_allowed_size_in_bytes: int = 128 * 1024
    batching_max_publish_delay_ms: int = 10
    batching_type: int = BatchingType.Default
    chunking_enabled: bool = False
    access_mode: int = ProducerAccessMode.Shared
    properties: Mapping[str, str] = field(default_factory=dict)
    batched_filter_properties: Sequence[str] = ()
    initial_subscription_name: str | None = None
    schema: Schema | None = None
    """Encodes what is sent and is registered with the broker; None sends bytes as they are."""
    encryption_keys: tuple[str, ...] = ()
    """Names of the keys every entry's data key is wrapped under (none: not encrypted)."""
    crypto_key_reader: CryptoKeyReader | None = None
    max_pending_messages_across_partitions: int = 50000
    """A topic of n partitions: each partition's producer holds at most this / n pending (and
    at most max_pending_messages), as the official client divides it."""
