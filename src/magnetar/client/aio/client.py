"""The asyncio client: connection pool, lookups, and the factories for producers, consumers, readers.

Arguments carry the official client's names and defaults (`pulsar.Client.create_producer`,
`subscribe`, `create_reader`), so code moves between the two by changing the import and
adding `await`. Extras: `batched_filter_properties` (PIP-191) on producers; messages have
`index()` and `broker_publish_time()` (PIP-70).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.aio.consumer import Consumer
from magnetar.client.aio.consumer_config import ConsumerConfig, ReceiveQueue
from magnetar.client.aio.context import ClientContext
from magnetar.client.aio.letters import Letters
from magnetar.client.aio.lookup import LookupService
from magnetar.client.aio.multi_consumer import MultiTopicsConsumer
from magnetar.client.aio.options import (
    apply_key_shared_policy,
    batch_receive_policy_of,
    check_tls,
    counted,
    dead_letter_policy_of,
    encryption_keys_of,
    failure_action_of,
    key_reader_of,
    processors_of,
    refuse_unsupported,
    regex_mode_of,
    schema_of,
    start_id_of,
    use_logger,
)
from magnetar.client.aio.partitioned_producer import PartitionedProducer
from magnetar.client.aio.pool import ConnectionPool, PoolConfig
from magnetar.client.aio.producer import Producer, ProducerConfig
from magnetar.client.aio.reader import Reader
from magnetar.client.aio.retries import retried
from magnetar.client.aio.transaction import CoordinatorClient, Transaction
from magnetar.client.aio.writer_schemas import WriterSchemas
from magnetar.client.enums import (
    BatchingType,
    CompressionType,
    ConsumerType,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
)
from magnetar.client.topic_name import full_topic_name, partition_name
from magnetar.client.url import parse_service_url
from magnetar.credentials.authentication import Authentication
from magnetar.credentials.security import ClientSecurity
from magnetar.wire.frames import DEFAULT_MAX_MESSAGE_SIZE
from magnetar.wire.txn import TxnId

if TYPE_CHECKING:
    from magnetar.client.schema import Schema

AnyProducer = Producer | PartitionedProducer
AnyConsumer = Consumer | MultiTopicsConsumer


class Client:
    """`magnetar.client.aio.Client(service_url, operation_timeout_seconds=30, ...)`.

    Create it inside a running event loop (or `async with Client(...) as client:`).
    """

    def __init__(self, service_url: str, authentication: Authentication | None = None,
                 operation_timeout_seconds: float = 30, io_threads: int = 1, message_listener_threads: int = 1,
                 concurrent_lookup_requests: int = 50000, log_conf_file_path: str | None = None,
                 stats_interval_in_seconds: int = 600, use_tls: bool = False,
                 tls_trust_certs_file_path: str | None = None, tls_allow_insecure_connection: bool = False,
                 tls_validate_hostname: bool = False, logger: Any = None, connection_timeout_ms: int = 10000,
                 listener_name: str | None = None, tls_private_key_file_path: str | None = None,
                 tls_certificate_file_path: str | None = None, keep_alive_interval_seconds: float = 30,
                 enable_transaction: bool = False) -> None:
        if authentication is not None and not isinstance(authentication, Authentication):
            raise errors.InvalidConfiguration("authentication must be one of magnetar.client's AuthenticationToken, "
                                              f"AuthenticationTLS or AuthenticationBasic, not {type(authentication)}")
        if isinstance(logger, logging.Logger):
            use_logger(logger)
            logger = None
        refuse_unsupported(io_threads=io_threads, message_listener_threads=message_listener_threads,
                           log_conf_file_path=log_conf_file_path, logger=logger,
                           stats_interval_in_seconds=stats_interval_in_seconds)
        certificate = check_tls(service_url, use_tls, tls_certificate_file_path, tls_private_key_file_path)
        self.service_url = parse_service_url(service_url).url
        self.operation_timeout = float(operation_timeout_seconds)
        security = ClientSecurity(authentication or Authentication(), tls_trust_certs_file_path,
                                  tls_allow_insecure_connection, tls_validate_hostname, certificate)
        self.pool = ConnectionPool(PoolConfig(self.operation_timeout, connection_timeout_ms / 1000,
                                              keep_alive_interval_seconds, security))
        self.lookup = LookupService(self.pool, self.service_url, listener_name or "",
                                    counted("concurrent_lookup_requests", concurrent_lookup_requests, 1))
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.context = ClientContext(self.pool, self.lookup, self.operation_timeout, self.max_message_size,
                                     WriterSchemas(self.pool, self.lookup, self.operation_timeout))
        """What the producers, consumers and readers this client creates see of it."""
        self._handles: set[Any] = set()
        self.closed = False
        self._coordinators = CoordinatorClient(self.context) if enable_transaction else None
        """The transaction coordinators' client (the Java client's enableTransaction)."""

    def new_producer_id(self) -> int:
        return self.context.new_producer_id()

    def new_consumer_id(self) -> int:
        return self.context.new_consumer_id()

    def _check_open(self) -> None:
        if self.closed:
            raise errors.AlreadyClosed("client is closed")

    async def _partitions(self, topic: str) -> int:
        """The topic's partition count, the first thing producers, consumers and readers ask:
        while the broker cannot be reached it is asked again until the operation timeout, as the
        official clients' lookups are, so a client started during a broker restart waits for it."""

        async def once() -> int:
            try:
                async with asyncio.timeout(self.operation_timeout):
                    return await self.lookup.partitions(topic)
            except TimeoutError:
                raise errors.Timeout(f"partition lookup of {topic} timed out") from None

        return await retried(once, self.operation_timeout, f"partition lookup of {topic}")

    # -- producers
    async def create_producer(self, topic: str, producer_name: str | None = None, schema: Any = None,
                              initial_sequence_id: int | None = None, send_timeout_millis: int = 30000,
                              compression_type: Any = CompressionType.NONE, max_pending_messages: int = 1000,
                              max_pending_messages_across_partitions: int = 50000, block_if_queue_full: bool = False,
                              batching_enabled: bool = False, batching_max_messages: int = 1000,
                              batching_max_allowed_size_in_bytes: int = 128 * 1024,
                              batching_max_publish_delay_ms: int = 10, chunking_enabled: bool = False,
                              message_routing_mode: Any = PartitionsRoutingMode.RoundRobinDistribution,
                              lazy_start_partitioned_producers: bool = False,
                              properties: Mapping[str, str] | None = None,
                              batching_type: Any = BatchingType.Default, encryption_key: Any = None,
                              crypto_key_reader: Any = None, access_mode: Any = ProducerAccessMode.Shared,
                              message_router: Callable[[Any, int], int] | None = None,
                              batched_filter_properties: Sequence[str] = (),
                              config: ProducerConfig | None = None) -> AnyProducer:
        self._check_open()
        if chunking_enabled and batching_enabled:
            raise errors.InvalidConfiguration("chunking and batching cannot both be enabled")
        refuse_unsupported(lazy_start_partitioned_producers=lazy_start_partitioned_producers)
        if config is None:
            config = ProducerConfig(
                producer_name=producer_name, initial_sequence_id=initial_sequence_id,
                send_timeout_millis=send_timeout_millis, compression_type=int(compression_type),
                max_pending_messages=max_pending_messages, block_if_queue_full=block_if_queue_full,
                batching_enabled=batching_enabled, batching_max_messages=batching_max_messages,
                batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
                batching_max_publish_delay_ms=batching_max_publish_delay_ms, batching_type=int(batching_type),
                chunking_enabled=chunking_enabled, access_mode=int(access_mode), properties=dict(properties or {}),
                batched_filter_properties=tuple(batched_filter_properties), schema=schema_of(schema),
                encryption_keys=encryption_keys_of(encryption_key, crypto_key_reader),
                crypto_key_reader=key_reader_of(crypto_key_reader),
                max_pending_messages_across_partitions=counted("max_pending_messages_across_partitions",
                                                             max_pending_messages_across_partitions),
            )
        topic = full_topic_name(topic)
        partitions = await self._partitions(topic)
        producer: AnyProducer
        if partitions > 0:
            producer = PartitionedProducer(self.context, topic, config, partitions, int(message_routing_mode),
                                           message_router)
        else:
            producer = Producer(self.context, topic, config)
        await producer.start()
        self._handles.add(producer)
        return producer

    # -- consumers
    async def subscribe(self, topic: str | Sequence[str] | re.Pattern[str], subscription_name: str,
                        consumer_type: Any = ConsumerType.Exclusive, schema: Any = None,
                        message_listener: Any = None, receiver_queue_size: int = 1000,
                        max_total_receiver_queue_size_across_partitions: int = 50000,
                        consumer_name: str | None = None, unacked_messages_timeout_ms: int | None = None,
                        broker_consumer_stats_cache_time_ms: int = 30000,
                        negative_ack_redelivery_delay_ms: int = 60000, is_read_compacted: bool = False,
                        properties: Mapping[str, str] | None = None, pattern_auto_discovery_period: int = 60,
                        initial_position: Any = InitialPosition.Latest, crypto_key_reader: Any = None,
                        replicate_subscription_state_enabled: bool = False, max_pending_chunked_message: int = 10,
                        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
                        start_message_id_inclusive: bool = False, batch_receive_policy: Any = None,
                        key_shared_policy: Any = None, batch_index_ack_enabled: bool = False,
                        regex_subscription_mode: Any = None, dead_letter_policy: Any = None,
                        crypto_failure_action: Any = None, subscription_properties: Mapping[str, str] | None = None,
                        retry_enable: bool = False, payload_processor: Any = None,
                        queue: ReceiveQueue | None = None) -> AnyConsumer:
        self._check_open()
        if message_listener is not None:
            raise errors.InvalidConfiguration("message listeners are not supported: use `async for`")
        refuse_unsupported(broker_consumer_stats_cache_time_ms=broker_consumer_stats_cache_time_ms,
                           auto_ack_oldest_chunked_message_on_queue_full=auto_ack_oldest_chunked_message_on_queue_full)
        if unacked_messages_timeout_ms and unacked_messages_timeout_ms < 10_000:
            raise ValueError("Unacknowledged message timeout should be greater than 10 seconds (as the official "
                             "client requires)")
        config = ConsumerConfig(
            consumer_type=int(consumer_type), receiver_queue_size=receiver_queue_size,
            consumer_name=consumer_name, unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms, is_read_compacted=is_read_compacted,
            properties=dict(properties or {}), subscription_properties=dict(subscription_properties or {}),
            initial_position=int(initial_position), start_message_id_inclusive=start_message_id_inclusive,
            batch_index_ack_enabled=batch_index_ack_enabled,
            replicate_subscription_state_enabled=replicate_subscription_state_enabled,
            max_pending_chunked_message=max_pending_chunked_message,
            dead_letter_policy=dead_letter_policy_of(dead_letter_policy),
            payload_processors=processors_of(payload_processor), schema=schema_of(schema),
            crypto_key_reader=key_reader_of(crypto_key_reader),
            crypto_failure_action=failure_action_of(crypto_failure_action),
            batch_receive_policy=batch_receive_policy_of(batch_receive_policy),
            max_total_receiver_queue_size_across_partitions=counted(
                "max_total_receiver_queue_size_across_partitions", max_total_receiver_queue_size_across_partitions),
            regex_subscription_mode=regex_mode_of(regex_subscription_mode),
        )
        if key_shared_policy is not None:
            apply_key_shared_policy(config, key_shared_policy)
        letters = None
        if config.dead_letter_policy is not None:
            first = topic.pattern if isinstance(topic, re.Pattern) else topic if isinstance(topic, str) else topic[0]
            letters = Letters(functools.partial(self._letter_producer, schema=config.schema),
                              full_topic_name(first), subscription_name, config.dead_letter_policy)
        elif retry_enable:
            raise errors.InvalidConfiguration("retry_enable needs a dead_letter_policy (max_redeliver_count)")
        if retry_enable:
            assert letters is not None
            topic = [topic, letters.retry_letter_topic] if isinstance(topic, str) else [*topic,
                                                                                         letters.retry_letter_topic]
        consumer: AnyConsumer
        if isinstance(topic, re.Pattern):
            pattern = topic if "://" in topic.pattern else re.compile(full_topic_name(topic.pattern))
            consumer = MultiTopicsConsumer(self.context, [], subscription_name, config, queue, pattern,
                                           float(pattern_auto_discovery_period), letters)
        elif isinstance(topic, str):
            name = full_topic_name(topic)
            partitions = await self._partitions(name)
            if partitions > 0:
                consumer = MultiTopicsConsumer(self.context, [name], subscription_name, config, queue, letters=letters)
            else:
                consumer = Consumer(self.context, name, subscription_name, config, queue, letters=letters)
        else:
            consumer = MultiTopicsConsumer(self.context, list(topic), subscription_name, config, queue, letters=letters)
        await consumer.start()
        self._handles.add(consumer)
        if letters is not None:
            self._handles.add(letters)
        return consumer

    async def create_reader(self, topic: str, start_message_id: Any, schema: Any = None, reader_listener: Any = None,
                            receiver_queue_size: int = 1000, reader_name: str | None = None,
                            subscription_role_prefix: str | None = None, is_read_compacted: bool = False,
                            crypto_key_reader: Any = None, start_message_id_inclusive: bool = False,
                            crypto_failure_action: Any = None, payload_processor: Any = None,
                            queue: ReceiveQueue | None = None) -> Reader:
        self._check_open()
        if reader_listener is not None:
            raise errors.InvalidConfiguration("reader listeners are not supported: use `async for`")
        reader = Reader(self.context, full_topic_name(topic), start_id_of(start_message_id),
                        receiver_queue_size=receiver_queue_size, reader_name=reader_name,
                        subscription_role_prefix=subscription_role_prefix, is_read_compacted=is_read_compacted,
                        start_message_id_inclusive=start_message_id_inclusive, queue=queue,
                        payload_processors=processors_of(payload_processor), schema=schema_of(schema),
                        crypto_key_reader=key_reader_of(crypto_key_reader),
                        crypto_failure_action=failure_action_of(crypto_failure_action))
        await reader.start()
        self._handles.add(reader)
        return reader

    async def _letter_producer(self, topic: str, initial_subscription_name: str | None,
                               schema: Schema | None) -> AnyProducer:
        """A dead- or retry-letter topic's producer (Letters create them on first use), with the
        consumer's schema, as Pulsar's clients make it: letters are tagged with it."""
        config = ProducerConfig(initial_subscription_name=initial_subscription_name, schema=schema)
        return await self.create_producer(topic, config=config)

    async def new_transaction(self, timeout: float = 60) -> Transaction:
        """A transaction the broker aborts unless it ends within `timeout` seconds (PIP-31;
        needs `enable_transaction=True`, and a broker with transactionCoordinatorEnabled)."""
        self._check_open()
        if self._coordinators is None:
            raise errors.InvalidConfiguration("transactions need Client(..., enable_transaction=True)")
        seconds = max(1, int(timeout))
        return Transaction(self._coordinators, await self._coordinators.new_txn(seconds), seconds)

    async def resume_transaction(self, txn_id: tuple[int, int]) -> Transaction:
        """A handle on a transaction another client opened, by its id (most, least bits), to
        commit or abort it: the coordinator knows a transaction by id, not by connection, so
        a driver can end what its tasks opened (the Spark sink's two phases)."""
        self._check_open()
        if self._coordinators is None:
            raise errors.InvalidConfiguration("transactions need Client(..., enable_transaction=True)")
        await self._coordinators.start()
        most, least = txn_id
        return Transaction(self._coordinators, TxnId(int(most), int(least)), 0)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        name = full_topic_name(topic)
        count = await self._partitions(name)
        return [name] if count == 0 else [partition_name(name, i) for i in range(count)]

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await asyncio.gather(*(h.close() for h in list(self._handles)), return_exceptions=True)
        self._handles.clear()
        self.pool.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
