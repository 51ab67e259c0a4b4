"""The broker: owns storage, the topic registry and the listening socket."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.broker.auth.authentication import AuthenticationService
from magnetar.broker.auth.authorization import AuthorizationService
from magnetar.broker.compaction import (
    CompactionManager,
    CompactionOptions,
    TopicCompactionService,
    load_compaction_service_factory,
)
from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.entry_filters import EntryFilterProvider
from magnetar.broker.entry_metadata import EntryMetadataStamper
from magnetar.broker.errors import BrokerServiceError, InvalidPartitionCountError, InvalidResourceError
from magnetar.broker.monitors.backlog_quota import BacklogQuotaChecker
from magnetar.broker.monitors.compaction import CompactionMonitor
from magnetar.broker.monitors.inactivity import InactivityMonitor
from magnetar.broker.monitors.message_expiry import MessageExpiryMonitor
from magnetar.broker.monitors.periodic import PeriodicTask
from magnetar.broker.monitors.retention import RetentionMonitor
from magnetar.broker.monitors.revalidation import HandleRevalidator
from magnetar.broker.policies.resources import NamespaceResources
from magnetar.broker.policies.topic_policies import TopicPolicies
from magnetar.broker.schema_registry import SchemaRegistryService
from magnetar.broker.service.loop_lag import LoopLagProbe
from magnetar.broker.tls import CertificateReloader, server_context
from magnetar.broker.topics.context import BrokerContext
from magnetar.broker.topics.failed_writes import FailedWrites
from magnetar.broker.topics.full_disk import FullDisk
from magnetar.broker.topics.loop_bridge import LoopBridge
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.transport.accept_errors import AcceptErrorReporter
from magnetar.broker.transport.advertised_listeners import (
    AdvertisedListener,
    AdvertisedListeners,
    default_advertised_address,
    internal_listener_name,
    parse_advertised_listeners,
)
from magnetar.broker.transport.connection import ServerCnx
from magnetar.broker.transport.connection_controller import ConnectionController, PartialFrameBudget
from magnetar.broker.transport.topic_list import TopicsPattern, filter_topics
from magnetar.storage import ManagedLedger, ManagedLedgerConfig, ManagedLedgerFactory, StorageFullError, bump_counter
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service.ledger_openings import LedgerOpenings
    from magnetar.broker.service.protocol_handlers import ProtocolHandler
    from magnetar.broker.topics.nonpersistent.non_persistent_topic import NonPersistentTopic
    from magnetar.broker.transactions.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)
_PARTITIONED_PREFIX = "/admin/partitioned-topics/"
_BOOT_COUNTER_KEY = "/broker/boot-counter"
#: The partitioned topic clients look up to reach transaction coordinators (magnetar.wire.txn's
#: COORDINATOR_ASSIGN_TOPIC, spelled here so that a broker without transactions imports nothing of them).
_COORDINATOR_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
#: No partition count above this is ever created or believed, whatever the configuration:
#: every partition is a managed ledger, and listings name each one.
MAX_PARTITIONS_CEILING = 65536
#: Stored topics loaded per event-loop iteration at start-up.
TOPICS_LOADED_PER_SLICE = 20
#: Stopping waits this long at most for the receipts of SENDs being stored (a group commit and
#: an fsync: milliseconds, unless the disk hangs), checking this often.
STOP_RECEIPTS_TIMEOUT_SECONDS = 10.0
STOP_RECEIPTS_POLL_SECONDS = 0.005
Mode = pb.CommandGetTopicsOfNamespace


def managed_ledger_config(config: ServiceConfiguration) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(
        max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
        max_size_per_ledger_bytes=config.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024,
        max_ledger_rollover_time_seconds=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60,
        min_ledger_rollover_time_seconds=config.managedLedgerMinLedgerRolloverTimeMinutes * 60,
        sync_data=config.journalSyncData,
        group_commit_max_delay_seconds=config.journalMaxGroupWaitMSec / 1000,
        cache_size_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
        cache_max_age_seconds=config.managedLedgerCacheEvictionTimeThresholdMillis / 1000,
        max_open_files=config.managedLedgerMaxOpenFiles,
    )


class BrokerService:
    def __init__(self, config: ServiceConfiguration, data_dir: Path) -> None:
        self.config = config
        data_dir.mkdir(parents=True, exist_ok=True)
        self.factory = ManagedLedgerFactory(data_dir, managed_ledger_config(config))
        self.metadata = self.factory.metadata_store
        self.resources = NamespaceResources(self.metadata, config.clusterName)
        self.resources.bootstrap(self.stored_namespaces())
        self.policies = TopicPolicies(self.metadata, self.resources, config)
        self.schemas = SchemaRegistryService(self.metadata, self.policies, config)
        self.entry_metadata = EntryMetadataStamper(
            config.brokerEntryMetadataInterceptors, config.brokerEntryMetadataIndexBase
        )
        self.topics: dict[str, PersistentTopic] = {}
        # Apart, so that what walks stored topics (TTL, metrics, shutdown) never meets one without a ledger.
        self.non_persistent_topics: dict[str, NonPersistentTopic] = {}
        self.connections: set[ServerCnx] = set()
        self._servers: list[asyncio.Server] = []
        self.authentication = AuthenticationService(config)
        self.authorization = AuthorizationService(config, self.resources)
        self.resources.watch(HandleRevalidator(
            self.authorization, lambda: [*self.topics.values(), *self.non_persistent_topics.values()]).changed)
        self.ssl_context = server_context(config) if config.tls_enabled else None
        self.cert_reloader = None if self.ssl_context is None else PeriodicTask(
            "TLS certificate reload", config.tlsCertRefreshCheckDurationSec,
            CertificateReloader(self.ssl_context, config).check)
        self._producer_counter = 0
        self._boot_id = self._next_boot_id()
        self.listeners: AdvertisedListeners
        self.port: int | None = None
        self.tls_port: int | None = None
        self.expiry_monitor = MessageExpiryMonitor(self)
        self.retention_monitor = RetentionMonitor(self)
        self.backlog_quota_checker = BacklogQuotaChecker(self)
        self.inactivity_monitor = InactivityMonitor(self)
        self.entry_filter_provider = EntryFilterProvider(config.entryFilterNames)
        self.connection_controller = ConnectionController(config.brokerMaxConnections, config.brokerMaxConnectionsPerIp)
        self.frame_budget = PartialFrameBudget(config.maxMessagePublishBufferSizeInMB * 1024 * 1024)
        self._stats_timer: asyncio.TimerHandle | None = None
        self.loop_lag = LoopLagProbe()
        self._compaction_factory = load_compaction_service_factory(config.compactionServiceFactoryClassName)
        self.compaction = CompactionManager()
        self.compaction_monitor = CompactionMonitor(self, self.compaction)
        self.full_disk = FullDisk(self.factory.disk_space)
        self.failed_writes = FailedWrites(lambda key: self.unload_topic(self.parse_topic(key)))
        self.context = BrokerContext(config, self.metadata, self.policies, self.entry_metadata,
                                     self.entry_filter_provider, self.new_compaction_service, self.full_disk,
                                     self.failed_writes)
        self.topic_watchers: list[Callable[[PersistentTopic], None]] = []
        """Told of every persistent topic as it loads (magnetar.replication starts its replicators)."""
        self.protocol_handlers: list[ProtocolHandler] = []
        self.protocol_listeners: dict[str, list[str]] = {}
        self.bound_settings: dict[str, str] = {}
        """Settings whose value is known once a handler listens (a port asked as 0, as bound):
        the runtime configuration shows these in place of the configured ones."""
        self._load_protocol_handlers()
        self.transactions: TransactionCoordinator | None = None
        if config.transactionCoordinatorEnabled:
            from magnetar.broker.service.transaction_participants import new_coordinator  # noqa: PLC0415 (only then)

            self.transactions = new_coordinator(self)
        self.cache_evictor = PeriodicTask("entry cache eviction", config.managedLedgerCacheEvictionIntervalMs / 1000,
                                          self.factory.entry_cache.evict_expired)

    def _load_protocol_handlers(self) -> None:
        if self.config.messagingProtocols:
            from magnetar.broker.service.protocol_handlers import load_protocol_handlers  # noqa: PLC0415 (only then)

            self.protocol_handlers = load_protocol_handlers(self)

    def new_compaction_service(self, ledger: ManagedLedger) -> TopicCompactionService:
        """The compaction service of a topic being loaded (compactionServiceFactoryClassName)."""
        options = CompactionOptions(self.config.topicCompactionRetainNullKey, self.config.maxMessageSize)
        return self._compaction_factory(ledger, self.factory, options)

    def _next_boot_id(self) -> int:
        """Distinguishes generated producer names across restarts of the same data."""
        return bump_counter(self.metadata, _BOOT_COUNTER_KEY, 1, initial=-1)  # the first boot is 0

    @property
    def service_urls(self) -> list[str]:
        """Where this broker listens (which may be a wildcard address): pulsar:// first."""
        host = self.config.bindAddress
        return [f"{scheme}://{host}:{port}" for scheme, port in (("pulsar", self.port), ("pulsar+ssl", self.tls_port))
                if port is not None]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        AcceptErrorReporter.install(loop)
        self.context.bridge = LoopBridge(loop)
        self.full_disk.start(self.context.bridge)
        config = self.config
        if config.brokerServicePort is not None:
            self.port = await self._listen(config.brokerServicePort, tls=False)
        if config.brokerServicePortTls is not None:
            self.tls_port = await self._listen(config.brokerServicePortTls, tls=True)
        if self.cert_reloader is not None:
            self.cert_reloader.start()
        self.listeners = self._advertised_listeners()
        self.expiry_monitor.start()
        self.retention_monitor.start()
        self.backlog_quota_checker.start()
        self.inactivity_monitor.start()
        self.compaction_monitor.start()
        self.cache_evictor.start()
        for handler in self.protocol_handlers:
            await handler.start()
        self._stats_timer = loop.call_later(self.config.statsUpdateFrequencyInSecs, self._sample_rates)
        self.loop_lag.start(loop)
        if self.transactions is not None:  # first: the topics loading next ask it about their open transactions
            loop.call_soon(self.transactions.recover)
        loop.call_soon(self._load_stored_topics, iter(self.factory.list_names()))

    async def _listen(self, port: int, *, tls: bool) -> int:
        """One listening socket; a TLS one drops a peer whose handshake is not over in time
        (garbage, or nothing) without disturbing anyone else."""
        loop = asyncio.get_running_loop()
        timeout = self.config.tlsHandshakeTimeoutSeconds
        extra = {"ssl": self.ssl_context, "ssl_handshake_timeout": timeout} if tls else {}
        server = await loop.create_server(lambda: ServerCnx(self, tls=tls), self.config.bindAddress, port,
                                          reuse_address=True, **extra)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    def _sample_rates(self) -> None:
        now = time.monotonic()
        for topic in [*self.topics.values(), *self.non_persistent_topics.values()]:
            topic.sample_rates(now)
        self.context.publish_latency.roll()
        self.loop_lag.roll()
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
        default = AdvertisedListener(
            "", f"pulsar://{host}:{self.port}" if self.port is not None else None,
            f"pulsar+ssl://{host}:{self.tls_port}" if self.tls_port is not None else None)
        return AdvertisedListeners(listeners, internal_listener_name(listeners, config.internalListenerName), default)

    async def stop(self) -> None:
        for handler in self.protocol_handlers:
            await handler.stop()
        self.expiry_monitor.stop()
        self.retention_monitor.stop()
        self.backlog_quota_checker.stop()
        self.inactivity_monitor.stop()
        self.compaction_monitor.stop()
        self.compaction.stop()
        if self.transactions is not None:
            self.transactions.stop()
        self.cache_evictor.stop()
        self.schemas.close()
        self.full_disk.stop()
        if self._stats_timer is not None:
            self._stats_timer.cancel()
        self.loop_lag.stop()
        if self.cert_reloader is not None:
            self.cert_reloader.stop()
        for server in self._servers:
            server.close()
        await self._answer_publishes_in_flight()
        for cnx in list(self.connections):
            cnx.close()
        for server in self._servers:
            await server.wait_closed()
        self._save_topic_states()
        self.factory.close()

    def _save_topic_states(self) -> None:
        """Every topic's state in one metadata commit (an fsync each made stopping a broker
        of 10,000 topics take most of a minute); on a full disk it is rebuilt from the
        ledgers at the next load instead, as a topic's own save_state would have it."""
        try:
            with self.metadata.transaction():
                for topic in self.topics.values():
                    topic.save_state()
        except StorageFullError as exc:
            log.warning("topics' state not saved: %s", exc)

    async def _answer_publishes_in_flight(self) -> None:
        """Stopping: no SEND is read any more, and those already being stored get their
        receipts before the connections close. Closing first would leave them stored without
        a receipt (the ledger makes accepted appends durable as it closes): the client sends
        them again after the restart and, without deduplication, they are stored twice. A
        SEND left unread in the socket has no receipt and is sent again, stored once."""
        connections = list(self.connections)
        for cnx in connections:
            cnx.pause_reading()
            cnx.drop_backlog()  # read but not handled: no receipt, so the client sends them again
        deadline = time.monotonic() + STOP_RECEIPTS_TIMEOUT_SECONDS
        while any(cnx.awaiting_receipts() for cnx in connections) and time.monotonic() < deadline:
            await asyncio.sleep(STOP_RECEIPTS_POLL_SECONDS)  # receipts arrive from the storage thread

    def generate_producer_name(self) -> str:
        self._producer_counter += 1
        return f"standalone-{self._boot_id}-{self._producer_counter}"

    # -- topics
    def parse_topic(self, name: str) -> TopicName:
        try:
            return TopicName.parse(name)
        except InvalidTopicNameError as exc:
            raise BrokerServiceError(pb.InvalidTopicName, str(exc)) from exc

    def check_namespace(self, topic: TopicName) -> None:
        """Topics live only in namespaces that exist (TopicNotFound otherwise, as Pulsar)."""
        if not self.resources.namespace_exists(topic.namespace_name):
            raise BrokerServiceError(pb.TopicNotFound, f"Namespace {topic.namespace_name} does not exist")

    def has_partitioned_topics(self, namespace: str) -> bool:
        """Whether partitioned-topic metadata (of either domain) lives in the namespace."""
        return any(TopicName.from_storage_name(key[len(_PARTITIONED_PREFIX):]).namespace_name == namespace
                   for key in self.metadata.list(_PARTITIONED_PREFIX))

    def stored_namespaces(self) -> set[str]:
        """Namespaces that hold stored topics or partitioned-topic metadata."""
        names = [TopicName.from_storage_name(n) for n in self.factory.list_names()]
        names += [TopicName.from_storage_name(k[len(_PARTITIONED_PREFIX):])
                  for k in self.metadata.list(_PARTITIONED_PREFIX)]
        return {name.namespace_name for name in names}

    def partitions_of(self, topic: TopicName) -> int | None:
        """The stored partition count; one past the absolute ceiling (written by brokers that
        took any number) reads as damaged metadata rather than as work to do."""
        raw = self.metadata.get(_PARTITIONED_PREFIX + topic.storage_name)
        if not raw:
            return None
        partitions = json.loads(raw)["partitions"]
        if not isinstance(partitions, int) or not 0 < partitions <= MAX_PARTITIONS_CEILING:
            raise BrokerServiceError(
                pb.MetadataError, f"{topic} has a stored partition count of {partitions!r}, which no broker accepts "
                f"(at most {MAX_PARTITIONS_CEILING}): delete the topic")
        return partitions

    def check_partition_count(self, partitions: int) -> None:
        """maxNumPartitionsPerPartitionedTopic (0: only the absolute ceiling), as Pulsar says it."""
        limit = self.config.maxNumPartitionsPerPartitionedTopic or MAX_PARTITIONS_CEILING
        if partitions <= 0:
            raise InvalidPartitionCountError("Number of partitions should be more than 0")
        if partitions > limit:
            raise InvalidPartitionCountError(f"Number of partitions should be less than or equal to {limit}")

    def create_partitioned_topic(self, topic: TopicName, partitions: int) -> None:
        self.check_partition_count(partitions)
        self.check_namespace(topic)
        if self.partitions_of(topic) is not None or self.topic_exists(topic):
            raise BrokerServiceError(pb.NotAllowedError, f"topic {topic} already exists")
        self.metadata.put(_PARTITIONED_PREFIX + topic.storage_name, json.dumps({"partitions": partitions}).encode())

    def update_partitions(self, topic: TopicName, partitions: int) -> None:
        """Pulsar only ever adds partitions: existing ones keep their data and keys."""
        current = self.partitions_of(topic)
        if current is None:
            raise BrokerServiceError(pb.TopicNotFound, f"Partitioned topic {topic} does not exist")
        self.check_partition_count(partitions)
        if partitions <= current:
            raise InvalidPartitionCountError(
                f"Number of new partitions must be greater than existing number of partitions ({current})")
        self.metadata.put(_PARTITIONED_PREFIX + topic.storage_name, json.dumps({"partitions": partitions}).encode())

    def is_coordinator_topic(self, name: str) -> bool:
        """Whether `name` is the coordinator-assign topic or one of its partitions, while this
        broker runs the coordinator: any client may look it up (it is how a client reaches
        the coordinator, whose commands hold each transaction to the role that opened it)."""
        if self.transactions is None:
            return False
        try:
            return str(self.parse_topic(name).partitioned_topic_name) == _COORDINATOR_ASSIGN_TOPIC
        except BrokerServiceError:
            return False

    def partitioned_metadata(self, name: str, *, auto_create: bool = True) -> int:
        """PARTITIONED_METADATA: the partition count, auto-creating as configured.

        A client that asks not to auto-create (PIP-344) learns that a topic is missing
        from TopicNotFound instead of a count of 0 that would read as "not partitioned".
        """
        topic = self.parse_topic(name)
        if self.transactions is not None and str(topic) == _COORDINATOR_ASSIGN_TOPIC:
            return 1  # one coordinator, this broker's
        if topic.partition_index >= 0 and (auto_create or self.topic_exists(topic)):
            return 0
        partitions = self.partitions_of(topic)
        if partitions is not None:
            return partitions
        if self.topic_exists(topic):
            return 0
        if not auto_create:
            raise BrokerServiceError(pb.TopicNotFound, f"Topic {name} does not exist")
        self.check_namespace(topic)
        if not self.config.allowAutoTopicCreation:
            return 0
        if self.config.allowAutoTopicCreationType == "partitioned":
            self.create_partitioned_topic(topic, self.config.defaultNumPartitions)
            return self.config.defaultNumPartitions
        return 0

    def topic_exists(self, topic: TopicName) -> bool:
        """A non-persistent topic exists while it is loaded: a restart forgets it."""
        key = str(topic)
        if key in self.topics or key in self.non_persistent_topics or self.factory.exists(topic.storage_name):
            return True
        if self.transactions is not None and str(topic.partitioned_topic_name) == _COORDINATOR_ASSIGN_TOPIC:
            return topic.partition_index == 0
        parent = self.partitions_of(topic.partitioned_topic_name)
        return parent is not None and 0 <= topic.partition_index < parent

    @functools.cached_property
    def _ledger_openings(self) -> LedgerOpenings:
        """Made with the first topic a client loads, which imports it (not at start-up)."""
        from magnetar.broker.service.ledger_openings import LedgerOpenings  # noqa: PLC0415

        return LedgerOpenings(self.factory)

    def get_topic(self, name: str, *, create: bool = True,
                  off_loop: bool = False) -> PersistentTopic | NonPersistentTopic:
        """The topic `name` names, loaded (or created) if need be. A loaded topic is found by a
        full name alone (the keys are full names): handlers ask per request, and parsing the
        name each time was most of the look-up. With `off_loop` a persistent topic's managed
        ledger is opened on a worker thread, and TopicLoading raised until it is open."""
        topic = self._loaded(name)
        if topic is not None:
            return topic
        topic_name = self.parse_topic(name)
        key = str(topic_name)
        topic = self._loaded(key)
        if topic is not None:
            return topic
        if not topic_name.persistent and not self.config.enableNonPersistentTopics:
            raise BrokerServiceError(pb.NotAllowedError, f"non-persistent topics are disabled on this broker: {name}")
        if topic_name.partition_index < 0 and self.partitions_of(topic_name):
            raise BrokerServiceError(pb.NotAllowedError, f"{name} is a partitioned topic: use its partitions")
        if not self.topic_exists(topic_name):
            if not (create and self.config.allowAutoTopicCreation):
                raise BrokerServiceError(pb.TopicNotFound, f"Topic {name} does not exist")
            self.check_namespace(topic_name)
        if not topic_name.persistent:
            from magnetar.broker.topics.nonpersistent.non_persistent_topic import NonPersistentTopic  # noqa: PLC0415 (first one's import)

            non_persistent = self.non_persistent_topics[key] = NonPersistentTopic(self.context, topic_name)
            return non_persistent
        refusal = self.failed_writes.refusal(key)
        if refusal is not None:
            raise BrokerServiceError(pb.ServiceNotReady, refusal)
        storage_name = topic_name.storage_name
        ledger = self._ledger_openings.get(storage_name) if off_loop else self.factory.open(storage_name)
        persistent = self.topics[key] = PersistentTopic(self.context, topic_name, ledger)
        persistent.apply_retention()
        log.info("[%s] loaded (%d entries, %d subscriptions)", key, persistent.ledger.number_of_entries(),
                 len(persistent.subscriptions))
        for watcher in self.topic_watchers:
            try:
                watcher(persistent)
            except Exception:  # the topic serves its clients whatever a watcher makes of it
                log.exception("[%s] topic watcher failed", key)
        return persistent

    def _loaded(self, key: str) -> PersistentTopic | NonPersistentTopic | None:
        return self.topics.get(key) or self.non_persistent_topics.get(key)

    # -- admin operations
    def unload_topic(self, name: TopicName) -> None:
        """Close a loaded topic; its clients reconnect, and the next touch loads it again."""
        key = str(name)
        topic = self.topics.pop(key, None)
        if topic is not None:
            topic.close()
            log.info("[%s] unloaded", key)
            return
        non_persistent = self.non_persistent_topics.pop(key, None)
        if non_persistent is not None:
            non_persistent.disconnect_clients()

    def delete_topic(self, name: TopicName, *, force: bool = False) -> None:
        """Delete a topic with everything it stores; without `force` only an idle one."""
        if not self.topic_exists(name) or self.partitions_of(name) is not None:
            raise BrokerServiceError(pb.TopicNotFound, f"Topic {name} does not exist")
        if not force:
            self._check_idle([name])
        self._remove_topic(name)
        self.schemas.delete_topic(name)
        log.info("[%s] deleted", name)

    def _remove_topic(self, name: TopicName) -> None:
        """Clients told to leave, then the ledgers, cursors, delayed indexes and policies gone."""
        self.unload_topic(name)
        if name.persistent:
            self.factory.delete(name.storage_name)
            from magnetar.broker.transactions.buffer import drop_snapshot  # noqa: PLC0415 (deletions only)
            from magnetar.broker.transactions.pending_ack import drop_topic  # noqa: PLC0415

            drop_topic(self.metadata, name.storage_name)  # acknowledgements a transaction held there
            drop_snapshot(self.metadata, name.storage_name)
        self.policies.delete_topic(name)

    def _check_idle(self, names: list[TopicName]) -> None:
        """Deleting without force is refused while a client is attached, as Pulsar refuses it."""
        for name in names:
            topic = self.topics.get(str(name)) or self.non_persistent_topics.get(str(name))
            if topic is not None and (topic.producers or any(s.consumers for s in topic.subscriptions.values())):
                raise InvalidResourceError("Topic has active producers/subscriptions")

    def delete_partitioned_topic(self, name: TopicName, *, force: bool = False) -> None:
        partitions = self.partitions_of(name)
        if partitions is None:
            raise BrokerServiceError(pb.TopicNotFound, f"Partitioned topic {name} does not exist")
        present = [p for p in map(name.partition, range(partitions))
                   if str(p) in self.topics or str(p) in self.non_persistent_topics
                   or self.factory.exists(p.storage_name)]
        if not force:
            self._check_idle(present)
        for partition in present:
            self._remove_topic(partition)
        self.metadata.delete(_PARTITIONED_PREFIX + name.storage_name)
        self.policies.delete_topic(name)
        self.schemas.delete_topic(name)

    def topics_of_namespace(self, namespace: str, pattern: TopicsPattern | None = None, *,
                            mode: int = Mode.PERSISTENT) -> list[str]:
        """Topics and partitions of a namespace, by domain as GET_TOPICS_OF_NAMESPACE asks.

        Persistent: every stored topic, and every partition of a partitioned one.
        Non-persistent: as in Pulsar, only the loaded topics (partitions) that are
        active (producers, consumers or subscriptions); nothing else knows of them.
        """
        names: set[str] = set()
        if mode in (Mode.PERSISTENT, Mode.ALL):
            for storage_name in self.factory.list_names():
                stored = TopicName.from_storage_name(storage_name)
                if stored.namespace_name == namespace:
                    names.add(str(stored))
            for key in self.metadata.list(_PARTITIONED_PREFIX):
                base = TopicName.from_storage_name(key[len(_PARTITIONED_PREFIX) :])
                if base.namespace_name == namespace and base.persistent:
                    try:
                        count = self.partitions_of(base) or 0
                    except BrokerServiceError as exc:
                        log.error("listing %s without %s: %s", namespace, base, exc.message)
                        continue
                    names.update(str(base.partition(i)) for i in range(count))
        if mode in (Mode.NON_PERSISTENT, Mode.ALL):
            names.update(key for key, topic in self.non_persistent_topics.items()
                         if topic.name.namespace_name == namespace and topic.is_active())
        return sorted(filter_topics(names, pattern) if pattern is not None else names)
