"""The broker: owns storage, the topic registry and the listening socket."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

from magnetar.broker.accept_errors import AcceptErrorReporter
from magnetar.broker.advertised_listeners import (
    AdvertisedListeners,
    default_advertised_address,
    internal_listener_name,
    parse_advertised_listeners,
)
from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.connection import ServerCnx
from magnetar.broker.entry_metadata import EntryMetadataStamper
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.loop_bridge import LoopBridge
from magnetar.broker.message_expiry import MessageExpiryMonitor
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_name import InvalidTopicNameError, TopicName
from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
_PARTITIONED_PREFIX = "/admin/partitioned-topics/"
_BOOT_COUNTER_KEY = "/broker/boot-counter"
_POLICIES_PREFIX = "/admin/policies/"
#: Stored topics loaded per event-loop iteration at start-up.
TOPICS_LOADED_PER_SLICE = 20


def managed_ledger_config(config: ServiceConfiguration) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(
        max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
        max_size_per_ledger_bytes=config.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024,
        max_ledger_rollover_time_seconds=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60,
        sync_data=config.journalSyncData,
        cache_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
        max_open_files=config.managedLedgerMaxOpenFiles,
    )


class BrokerService:
    def __init__(self, config: ServiceConfiguration, data_dir: Path) -> None:
        self.config = config
        data_dir.mkdir(parents=True, exist_ok=True)
        self.factory = ManagedLedgerFactory(data_dir, managed_ledger_config(config))
        self.metadata = self.factory.metadata_store
        self.entry_metadata = EntryMetadataStamper(
            config.brokerEntryMetadataInterceptors, config.brokerEntryMetadataIndexBase
        )
        self.topics: dict[str, PersistentTopic] = {}
        self.connections: set[object] = set()
        self._server: asyncio.Server | None = None
        self._producer_counter = 0
        self._boot_id = self._next_boot_id()
        self.bridge: LoopBridge
        self.listeners: AdvertisedListeners
        self.port = config.brokerServicePort
        self.expiry_monitor = MessageExpiryMonitor(self)
        self._stats_timer: asyncio.TimerHandle | None = None

    def _next_boot_id(self) -> int:
        """Distinguishes generated producer names across restarts of the same data."""
        raw = self.metadata.get(_BOOT_COUNTER_KEY)
        boot = int(raw) + 1 if raw else 0
        self.metadata.put(_BOOT_COUNTER_KEY, str(boot).encode())
        return boot

    @property
    def service_url(self) -> str:
        """Where this broker listens (which may be a wildcard address)."""
        return f"pulsar://{self.config.bindAddress}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        AcceptErrorReporter.install(loop)
        self.bridge = LoopBridge(loop)
        self._server = await loop.create_server(
            lambda: ServerCnx(self), self.config.bindAddress, self.config.brokerServicePort, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.listeners = self._advertised_listeners()
        self.expiry_monitor.start()
        self._stats_timer = loop.call_later(self.config.statsUpdateFrequencyInSecs, self._sample_rates)
        loop.call_soon(self._load_stored_topics, iter(self.factory.list_names()))

    def _sample_rates(self) -> None:
        now = time.monotonic()
        for topic in list(self.topics.values()):
            topic.sample_rates(now)
        self._stats_timer = asyncio.get_running_loop().call_later(
            self.config.statsUpdateFrequencyInSecs, self._sample_rates)

    def _load_stored_topics(self, names: Iterator[str]) -> None:
        """Load every stored topic, a slice per loop iteration, so that stats, /metrics and
        TTL see a subscription's backlog from the start, not once a client touches it."""
        batch = list(itertools.islice(names, TOPICS_LOADED_PER_SLICE))
        for storage_name in batch:
            name = str(TopicName.from_storage_name(storage_name))
            if name in self.topics:
                continue
            try:
                self.get_topic(name, create=False)
            except Exception:
                log.exception("could not load stored topic %s", name)
        if len(batch) == TOPICS_LOADED_PER_SLICE:
            asyncio.get_running_loop().call_soon(self._load_stored_topics, names)

    def _advertised_listeners(self) -> AdvertisedListeners:
        config = self.config
        listeners = parse_advertised_listeners(config.advertisedListeners)
        address = default_advertised_address(config.advertisedAddress, config.bindAddress)
        host = f"[{address}]" if ":" in address else address
        return AdvertisedListeners(
            listeners, internal_listener_name(listeners, config.internalListenerName), f"pulsar://{host}:{self.port}"
        )

    async def stop(self) -> None:
        self.expiry_monitor.stop()
        if self._stats_timer is not None:
            self._stats_timer.cancel()
        if self._server is not None:
            self._server.close()
        for cnx in list(self.connections):
            cnx.close()  # type: ignore[attr-defined]
        if self._server is not None:
            await self._server.wait_closed()
        for topic in self.topics.values():
            self.entry_metadata.save(topic.ledger, topic.entry_metadata_state)
        self.factory.close()

    def generate_producer_name(self) -> str:
        self._producer_counter += 1
        return f"standalone-{self._boot_id}-{self._producer_counter}"

    # -- topics
    def parse_topic(self, name: str) -> TopicName:
        try:
            topic = TopicName.parse(name)
        except InvalidTopicNameError as exc:
            raise BrokerServiceError(pb.InvalidTopicName, str(exc)) from exc
        if not topic.persistent:
            raise BrokerServiceError(pb.NotAllowedError, f"non-persistent topics are not supported: {name}")
        return topic

    def topic_policy(self, topic: TopicName, name: str) -> str | None:
        """A per-topic policy (e.g. messageTTL) set through the admin API.

        Partitions inherit the policy of their partitioned topic.
        """
        for owner in (topic, topic.partitioned_topic_name):
            raw = self.metadata.get(f"{_POLICIES_PREFIX}{owner.storage_name}/{name}")
            if raw is not None:
                return raw.decode()
        return None

    def set_topic_policy(self, topic: TopicName, name: str, value: str | None) -> None:
        key = f"{_POLICIES_PREFIX}{topic.storage_name}/{name}"
        if value is None:
            self.metadata.delete(key)
        else:
            self.metadata.put(key, value.encode())

    def partitions_of(self, topic: TopicName) -> int | None:
        raw = self.metadata.get(_PARTITIONED_PREFIX + topic.storage_name)
        return json.loads(raw)["partitions"] if raw else None

    def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        if partitions <= 0:
            raise BrokerServiceError(pb.NotAllowedError, "a partitioned topic needs at least one partition")
        if self.partitions_of(topic) is not None or self.factory.exists(topic.storage_name):
            raise BrokerServiceError(pb.NotAllowedError, f"topic {topic} already exists")
        self.metadata.put(_PARTITIONED_PREFIX + topic.storage_name, json.dumps({"partitions": partitions}).encode())

    def partitioned_metadata(self, name: str, *, auto_create: bool = True) -> int:
        """PARTITIONED_METADATA: the partition count, auto-creating as configured.

        A client that asks not to auto-create (PIP-344) learns that a topic is missing
        from TopicNotFound instead of a count of 0 that would read as "not partitioned".
        """
        topic = self.parse_topic(name)
        if topic.partition_index >= 0 and (auto_create or self.topic_exists(topic)):
            return 0
        partitions = self.partitions_of(topic)
        if partitions is not None:
            return partitions
        if self.factory.exists(topic.storage_name):
            return 0
        if not auto_create:
            raise BrokerServiceError(pb.TopicNotFound, f"Topic {name} does not exist")
        if not self.config.allowAutoTopicCreation:
            return 0
        if self.config.allowAutoTopicCreationType == "partitioned":
            self.create_partitioned_topic(topic, self.config.defaultNumPartitions)
            return self.config.defaultNumPartitions
        return 0

    def topic_exists(self, topic: TopicName) -> bool:
        if str(topic) in self.topics or self.factory.exists(topic.storage_name):
            return True
        parent = self.partitions_of(topic.partitioned_topic_name)
        return parent is not None and 0 <= topic.partition_index < parent

    def get_topic(self, name: str, *, create: bool = True) -> PersistentTopic:
        topic_name = self.parse_topic(name)
        key = str(topic_name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if topic_name.partition_index < 0 and self.partitions_of(topic_name):
            raise BrokerServiceError(pb.NotAllowedError, f"{name} is a partitioned topic: use its partitions")
        if not self.topic_exists(topic_name) and not (create and self.config.allowAutoTopicCreation):
            raise BrokerServiceError(pb.TopicNotFound, f"Topic {name} does not exist")
        topic = PersistentTopic(self, topic_name, self.factory.open(topic_name.storage_name))
        self.topics[key] = topic
        return topic

    def topics_of_namespace(self, namespace: str, pattern: str | None = None) -> list[str]:
        names: set[str] = set()
        for storage_name in self.factory.list_names():
            stored = TopicName.from_storage_name(storage_name)
            if stored.namespace_name == namespace:
                names.add(str(stored))
        for key in self.metadata.list(_PARTITIONED_PREFIX):
            tenant, ns, domain, local = key[len(_PARTITIONED_PREFIX) :].split("/", 3)
            if f"{tenant}/{ns}" == namespace:
                base = TopicName(domain, tenant, ns, local)
                names.update(str(base.partition(i)) for i in range(self.partitions_of(base) or 0))
        if pattern:
            regex = re.compile(pattern)
            names = {n for n in names if regex.fullmatch(n)}
        return sorted(names)
