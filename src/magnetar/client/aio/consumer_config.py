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
from magnetar.client.enums import ConsumerCryptoFailureAction, ConsumerType, InitialPosition, RegexSubscriptionMode
from magnetar.client.message_id import MessageId
from magnetar.formats.processor import ProcessorSet

if TYPE_CHECKING:
    from magnetar.client.crypto.key_reader import CryptoKeyReader
    from magnetar.client.schema import Schema

ReceiveQueue = AsyncReceiveQueue | ThreadReceiveQueue
_DEFAULT_MAX_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BatchReceivePolicy:
    """What one `batch_receive()` returns, as the official client's policy says: it ends as soon
    as the batch holds `max_num_messages` messages or `max_num_bytes` of payload (the message
    that would pass it stays queued), else when `timeout_ms` has passed, with what arrived. A
    limit below 1 (a timeout below 0) is none."""

    max_num_messages: int = -1
    max_num_bytes: int = _DEFAULT_MAX_BYTES
    timeout_ms: int = 100

    @classmethod
    def of(cls, max_num_messages: int, max_num_bytes: int, timeout_ms: int) -> BatchReceivePolicy:
        """Checked as the official client checks it: without a count or size limit the size
        limit is its default, and a policy needs a limit or a timeout."""
        if max_num_messages <= 0 and max_num_bytes <= 0 and timeout_ms <= 0:
            raise ValueError("At least one of max_num_messages, max_num_bytes and timeout_ms must be specified")
        if max_num_messages <= 0 and max_num_bytes <= 0:
            max_num_bytes = _DEFAULT_MAX_BYTES
        return cls(max_num_messages, max_num_bytes, timeout_ms)

    def full(self, count: int, size: int) -> bool:
        return 0 < self.max_num_messages <= count or 0 < self.max_num_bytes <= size

    def takes(self, count: int, size: int, length: int) -> bool:
        """Whether a message of `length` bytes joins a batch of `count` messages and `size` bytes
        (the first always does)."""
        return count == 0 or self.max_num_bytes <= 0 or size + length <= self.max_num_bytes

    def deadline(self, now: float) -> float | None:
        return None if self.timeout_ms < 0 else now + self.timeout_ms / 1000


def overridden(policy: BatchReceivePolicy, max_num_messages: int | None, max_num_bytes: int | None,
               timeout_ms: int | None) -> BatchReceivePolicy:
    """`policy` with the limits a batch_receive call gives itself (None: the policy's)."""
    if max_num_messages is None and max_num_bytes is None and timeout_ms is None:
        return policy
    return BatchReceivePolicy(policy.max_num_messages if max_num_messages is None else max_num_messages,
                              policy.max_num_bytes if max_num_bytes is None else max_num_bytes,
                              policy.timeout_ms if timeout_ms is None else timeout_ms)


class ConsumerBatchReceivePolicy:
    """The official `pulsar.ConsumerBatchReceivePolicy(max_num_message, max_num_bytes, timeout_ms)`."""

    def __init__(self, max_num_message: int, max_num_bytes: int, timeout_ms: int) -> None:
        self._policy = BatchReceivePolicy.of(max_num_message, max_num_bytes, timeout_ms)

    def policy(self) -> BatchReceivePolicy:
        return self._policy


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
    batch_receive_policy: BatchReceivePolicy = BatchReceivePolicy()
    max_total_receiver_queue_size_across_partitions: int = 50000
    """A topic of n partitions: each partition's consumer queues at most this / n (and at most
    receiver_queue_size), as the official client divides it."""
    regex_subscription_mode: int = RegexSubscriptionMode.PersistentOnly
