"""Broker configuration under the key names of Pulsar's broker.conf.

A Pulsar user's broker.conf lines work as written. Every key is one of three kinds:
magnetar's (applied), a key some Pulsar release knew that magnetar does not implement
(accepted and named in a start-up warning, so an existing standalone.conf starts), or
neither. Here the third kind is refused with its origin, all at once, so a typo never
leaves a broker running with a setting the operator didn't get; config_loading decides
where such a key is only warned about (files and the environment, as Pulsar ignores
them there) and knows where settings come from and in which order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

from magnetar.broker.config.properties import Setting
from magnetar.schemas.model import CompatibilityStrategy
from magnetar.spelling import did_you_mean

#: Pulsar's modes of brokerDeleteInactiveTopicsMode (see broker.monitors.inactivity).
_SCHEMA_STRATEGIES = tuple(strategy.value for strategy in CompatibilityStrategy)
_INACTIVE_TOPIC_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")
#: functionInstanceIsolation's values (see magnetar.functions.sandbox).
_ISOLATIONS = ("auto", "bubblewrap", "none")
#: Pulsar's backlog quota retention policies (see broker.policies.backlog_quota).
_BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


class ConfigError(ValueError):
    """A configuration key or value that magnetar refuses; the message names the key."""


#: A check of a whole configuration beyond `validate`, raising ConfigError that names the
#: key: what only a feature can tell (service.config_checks.check_features).
Check = Callable[["ServiceConfiguration"], None]


@dataclass(slots=True)
class ServiceConfiguration:
    """Every setting the broker reads, with Pulsar's name and (mostly) Pulsar's default."""

    bindAddress: str = "127.0.0.1"
    # what LOOKUP answers (see broker.transport.advertised_listeners): empty = the bind address, or the
    # host name when binding a wildcard address
    advertisedAddress: str = ""
    advertisedListeners: str = ""
    internalListenerName: str = ""
    # a port set empty (`brokerServicePort=`) is not listened on, as in Pulsar
    brokerServicePort: int | None = 6650
    webServicePort: int | None = 8080
    # TLS (see broker.tls): pulsar+ssl:// and https:// on their own ports
    brokerServicePortTls: int | None = None
    webServicePortTls: int | None = None
    tlsCertificateFilePath: str = ""
    tlsKeyFilePath: str = ""
    tlsTrustCertsFilePath: str = ""
    tlsRequireTrustedClientCertOnConnect: bool = False
    tlsAllowInsecureConnection: bool = False
    tlsProtocols: list[str] = field(default_factory=list)
    tlsCiphers: list[str] = field(default_factory=list)
    tlsCertRefreshCheckDurationSec: int = 300
    # magnetar's own: a TLS handshake must end within this, or the connection is dropped
    tlsHandshakeTimeoutSeconds: float = 10.0
    # authentication and authorization (see broker.auth), Pulsar's keys and defaults
    authenticationEnabled: bool = False
    authenticationProviders: list[str] = field(default_factory=list)
    authenticationRefreshCheckSeconds: int = 60
    anonymousUserRole: str = ""
    tokenSecretKey: str = ""
    tokenPublicKey: str = ""
    tokenPublicAlg: str = "RS256"
    tokenAuthClaim: str = ""
    tokenAudienceClaim: str = ""
    tokenAudience: str = ""
    tokenAllowedClockSkewSeconds: int = 0
    basicAuthConf: str = ""
    authorizationEnabled: bool = False
    superUserRoles: list[str] = field(default_factory=list)
    # /metrics asks for credentials (any authenticated role), as Pulsar's does
    authenticateMetricsEndpoint: bool = False
    # magnetar's own: an admin request (its body included) must end within this, its answer be
    # taken by the client within it too, and a new connection send its first request's headers
    webServiceRequestTimeoutSeconds: int = 30
    # admin API connections at once (Pulsar's key and default; 0 = no limit): past it, closed at once
    maxHttpServerConnections: int = 2048
    maxMessageSize: int = 5 * 1024 * 1024
    keepAliveIntervalSeconds: int = 30
    # connection limits (0 = none, Pulsar's default)
    brokerMaxConnections: int = 0
    brokerMaxConnectionsPerIp: int = 0
    # bytes of frames received in part, over all connections (see broker.transport.connection_controller);
    # Pulsar's default is half the JVM's direct memory, which has no Python equivalent
    maxMessagePublishBufferSizeInMB: int = 64
    # topics
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    # Pulsar's default is 0 (no limit). A client that may create topics could then ask for
    # a trillion partitions, and every partition is a managed ledger that listings name one
    # by one; 1024 is far beyond what one standalone serves well. 0 still means "no limit"
    # up to the broker's absolute ceiling (65536).
    maxNumPartitionsPerPartitionedTopic: int = 1024
    enableNonPersistentTopics: bool = True
    # GET_TOPICS_OF_NAMESPACE filters by the client's pattern (RE2) only up to this length,
    # else answers the whole list for the client to filter (Pulsar's keys and defaults)
    enableBrokerSideSubscriptionPatternEvaluation: bool = True
    subscriptionPatternMaxLength: int = 50
    # per-topic limits (Pulsar's keys and defaults; 0 = no limit), overridden by the
    # namespace and topic policies of broker.topics.topic_limits
    maxProducersPerTopic: int = 0
    maxConsumersPerTopic: int = 0
    maxConsumersPerSubscription: int = 0
    maxUnackedMessagesPerConsumer: int = 50000
    # schema registry (broker.schema_registry): the strategy when neither topic nor namespace
    # sets one, whether new schemas may be added, whether a producer without a schema may use a
    # topic that has one (Pulsar's keys and defaults)
    schemaCompatibilityStrategy: str = "FULL"
    isAllowAutoUpdateSchemaEnabled: bool = True
    isSchemaValidationEnforced: bool = False
    # magnetar's own: an Avro definition's fields, union branches and symbols at most (what parsing and
    # comparing it cost grows with; schemas.definitions.avro_members)
    schemaMaxFields: int = 10000
    # dispatch
    dispatcherMaxReadBatchSize: int = 100
    # entry bytes one read may take (at least one entry is read): without it a consumer's
    # permits, counted in messages, let 100 reads of 10,000-message batches (a GB) go at once
    dispatcherMaxReadSizeBytes: int = 5 * 1024 * 1024
    dispatcherMaxRoundRobinBatchSize: int = 20
    subscriptionRedeliveryTrackerEnabled: bool = True
    # magnetar honours ack_set by default: Pulsar's default (false) turns a
    # partial batch ack into a whole-entry ack, which loses messages on redelivery.
    acknowledgmentAtBatchIndexLevelEnabled: bool = True
    subscriptionKeySharedUseConsistentHashing: bool = True
    # storage
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    managedLedgerMaxLedgerRolloverTimeMinutes: float = 240.0
    # a full ledger keeps taking entries until this old (Pulsar's default; Pulsar takes
    # whole minutes, fractions are accepted so tests can use small values)
    managedLedgerMinLedgerRolloverTimeMinutes: float = 10.0
    # retention of consumed data (see broker.policies.retention): -1 = no limit; 0 and 0 delete
    # what every subscription has consumed. Minutes may be fractional (Pulsar: whole).
    defaultRetentionTimeInMinutes: float = 0.0
    defaultRetentionSizeInMB: int = 0
    retentionCheckIntervalInSeconds: int = 120
    managedLedgerCacheSizeMB: int = 64
    # cached entries older than this are dropped (Pulsar's default), checked at every append
    # and every managedLedgerCacheEvictionIntervalMs. Pulsar checks every 10 ms; here the
    # timer only matters to an idle broker (a busy one evicts as it appends), and waking a
    # Python process 100 times a second cost an idle broker 1.2% of a core (0.1% at 1 s)
    managedLedgerCacheEvictionTimeThresholdMillis: int = 1000
    managedLedgerCacheEvictionIntervalMs: int = 1000
    journalSyncData: bool = True
    # The journal's group commit (BookKeeper's key, 1 ms in Pulsar's standalone.conf): how long
    # the first append of a group may wait for others to share its fsync.
    journalMaxGroupWaitMSec: float = 1.0
    # magnetar's own key (broker.conf has none; BookKeeper's bookie has openFileLimit):
    # ledger files held open at once, closed least recently used first and reopened on
    # demand. Half a common soft limit of 1024, so connections keep the other half even
    # where the limit cannot be raised; two files per topic being written.
    managedLedgerMaxOpenFiles: int = 512
    # PIP-70
    brokerEntryMetadataInterceptors: list[str] = field(default_factory=list)
    exposingBrokerEntryMetadataToClientEnabled: bool = False
    # magnetar's own key: the index of a partition's first message (Pulsar: 0).
    brokerEntryMetadataIndexBase: int = 0
    # how often rates in stats and /metrics are worked out (Pulsar's default)
    statsUpdateFrequencyInSecs: int = 60
    # entry filters (PIP-105, see broker.entry_filters): plugin names of the
    # magnetar.entry_filters entry-point group; the directory of Pulsar's NAR files means
    # nothing here and is accepted and ignored
    entryFilterNames: list[str] = field(default_factory=list)
    entryFiltersDirectory: str = ""
    allowOverrideEntryFilters: bool = False
    dispatcherFilterRescheduledMessageDelay: int = 1000
    # backlog quotas (Pulsar's keys and defaults: -1 = no limit)
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: int = 60
    backlogQuotaDefaultLimitBytes: int = -1
    backlogQuotaDefaultLimitSecond: int = -1
    backlogQuotaDefaultRetentionPolicy: str = "producer_request_hold"
    # inactive topics and subscriptions (see broker.monitors.inactivity; Pulsar's keys, and Pulsar's
    # defaults except brokerDeleteInactiveTopicsEnabled, which Pulsar turns on)
    brokerDeleteInactiveTopicsEnabled: bool = False
    brokerDeleteInactiveTopicsFrequencySeconds: int = 60
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int = 60
    brokerDeleteInactiveTopicsMode: str = "delete_when_no_subscriptions"
    subscriptionExpirationTimeMinutes: float = 0.0  # Pulsar takes whole minutes; fractions are accepted
    subscriptionExpiryCheckIntervalInMinutes: float = 5.0
    # end-to-end encryption: refuse producers that do not encrypt (the namespace policy
    # encryption_required refuses their messages too)
    encryptionRequireOnProducer: bool = False
    # deduplication (Pulsar's keys and defaults)
    brokerDeduplicationEnabled: bool = False
    brokerDeduplicationEntriesInterval: int = 1000
    # message expiry
    ttlDurationDefaultInSeconds: int = 0
    messageExpiryCheckIntervalInMinutes: float = 5.0
    # PIP-26
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = 1000
    # magnetar never delivers early by default: Pulsar's default (false) lets a
    # message out up to one tick before deliver_at_time, its users' top complaint.
    isDelayedDeliveryDeliverAtTimeStrict: bool = True
    delayedDeliveryMaxDelayInMillis: int = 0
    delayedDeliveryTrackerFactoryClassName: str = (
        "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
    )
    # bucket tracker: entries buffered before they are sealed into segments, and bucket width
    delayedDeliveryMinIndexCountPerBucket: int = 50000
    # compaction (see broker.compaction)
    brokerServiceCompactionMonitorIntervalInSeconds: int = 60
    brokerServiceCompactionThresholdInBytes: int = 0
    topicCompactionRetainNullKey: bool = False
    compactionServiceFactoryClassName: str = "org.apache.pulsar.compaction.PulsarCompactionServiceFactory"
    # Pulsar Functions (magnetar.functions): the worker runs inside the standalone, on by default there
    functionsWorkerEnabled: bool = False
    # magnetar's own, in the functions worker's style: how instances are isolated (auto: a bubblewrap
    # sandbox where it works, saying loudly when it does not; bubblewrap: only that; none: Pulsar's
    # process runtime), and the OS user they run as when the broker runs as root (docs/functions.md)
    functionInstanceIsolation: str = "auto"
    functionInstanceUser: str = "nobody"
    delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds: int = 300
    # protocol handlers (Pulsar's key): names in the magnetar.protocol_handlers entry-point group,
    # loaded beside the Pulsar protocol; protocolHandlerDirectory (NAR files) means nothing here
    messagingProtocols: list[str] = field(default_factory=list)
    # Kafka-on-Pulsar's keys, read by the `kafka` protocol handler (docs/kafka.md)
    kafkaListeners: str = ""
    kafkaAdvertisedListeners: str = ""
    kafkaTenant: str = "public"
    kafkaNamespace: str = "default"
    # a SASL user name `tenant` or `tenant/namespace` chooses the connection's namespace (KoP's default: on)
    kafkaEnableMultiTenantMetadata: bool = True
    entryFormat: str = "pulsar"
    # KoP's key for Kafka's connections.max.idle.ms: a Kafka connection with no request for this
    # long is closed (0: never)
    connectionMaxIdleMs: int = 600_000

    @property
    def tls_enabled(self) -> bool:
        """Whether a TLS port (pulsar+ssl:// or https://) is configured."""
        return self.brokerServicePortTls is not None or self.webServicePortTls is not None

    def validate(self) -> None:
        """Refuse values no broker could run with, naming the key: what the values alone
        say. What needs a feature to tell is checked by a `Check` (see apply_settings)."""
        if self.allowAutoTopicCreationType not in ("non-partitioned", "partitioned"):
            raise ConfigError(
                "allowAutoTopicCreationType must be 'non-partitioned' or 'partitioned', "
                f"not {self.allowAutoTopicCreationType!r}"
            )
        positive = ("maxMessageSize", "defaultNumPartitions", "dispatcherMaxReadBatchSize",
                    "dispatcherMaxReadSizeBytes", "managedLedgerMaxEntriesPerLedger",
                    "managedLedgerMaxSizePerLedgerMbytes",
                    "managedLedgerMaxOpenFiles", "managedLedgerCacheEvictionIntervalMs",
                    "managedLedgerCacheEvictionTimeThresholdMillis",
                    "delayedDeliveryTickTimeMillis", "keepAliveIntervalSeconds", "statsUpdateFrequencyInSecs",
                    "backlogQuotaCheckIntervalInSeconds", "brokerDeleteInactiveTopicsFrequencySeconds",
                    "subscriptionExpiryCheckIntervalInMinutes", "dispatcherFilterRescheduledMessageDelay",
                    "brokerDeduplicationEntriesInterval", "retentionCheckIntervalInSeconds",
                    "managedLedgerMaxLedgerRolloverTimeMinutes",
                    "webServiceRequestTimeoutSeconds", "tlsCertRefreshCheckDurationSec",
                    "tlsHandshakeTimeoutSeconds", "authenticationRefreshCheckSeconds",
                    "maxMessagePublishBufferSizeInMB",
                    "delayedDeliveryMinIndexCountPerBucket",
                    "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds",
                    "brokerServiceCompactionMonitorIntervalInSeconds", "schemaMaxFields")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        if self.schemaCompatibilityStrategy.upper() not in _SCHEMA_STRATEGIES:
            raise ConfigError(f"schemaCompatibilityStrategy must be one of {', '.join(_SCHEMA_STRATEGIES)}, "
                              f"not {self.schemaCompatibilityStrategy!r}")
        if self.brokerServiceCompactionThresholdInBytes < 0:
            raise ConfigError("brokerServiceCompactionThresholdInBytes must be 0 (never) or positive, "
                              f"not {self.brokerServiceCompactionThresholdInBytes}")
        if self.brokerDeleteInactiveTopicsMode not in _INACTIVE_TOPIC_MODES:
            raise ConfigError(f"brokerDeleteInactiveTopicsMode must be one of {', '.join(_INACTIVE_TOPIC_MODES)}, "
                              f"not {self.brokerDeleteInactiveTopicsMode!r}")
        if self.backlogQuotaDefaultRetentionPolicy not in _BACKLOG_POLICIES:
            raise ConfigError(f"backlogQuotaDefaultRetentionPolicy must be one of {', '.join(_BACKLOG_POLICIES)}, "
                              f"not {self.backlogQuotaDefaultRetentionPolicy!r}")
        if self.functionInstanceIsolation not in _ISOLATIONS:
            raise ConfigError(f"functionInstanceIsolation must be one of {', '.join(_ISOLATIONS)}, "
                              f"not {self.functionInstanceIsolation!r}")
        if self.entryFormat not in ("pulsar", "kafka"):
            raise ConfigError(f"entryFormat must be 'pulsar' or 'kafka', not {self.entryFormat!r}")
        if 0 < self.maxNumPartitionsPerPartitionedTopic < self.defaultNumPartitions:
            raise ConfigError(f"defaultNumPartitions ({self.defaultNumPartitions}) exceeds "
                              f"maxNumPartitionsPerPartitionedTopic ({self.maxNumPartitionsPerPartitionedTopic})")
        for name in ("brokerMaxConnections", "brokerMaxConnectionsPerIp", "maxNumPartitionsPerPartitionedTopic",
                     "maxHttpServerConnections"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be 0 (no limit) or positive, not {getattr(self, name)}")
        for name in ("managedLedgerMinLedgerRolloverTimeMinutes", "journalMaxGroupWaitMSec", "connectionMaxIdleMs"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be 0 or positive, not {getattr(self, name)}")
        self._validate_ports()

    def _validate_ports(self) -> None:
        for name in ("brokerServicePort", "webServicePort", "brokerServicePortTls", "webServicePortTls"):
            port = getattr(self, name)
            if port is not None and not 0 <= port <= 65535:
                raise ConfigError(f"{name} must be a port number (0-65535) or empty (off), not {port}")
        if self.brokerServicePort is None and self.brokerServicePortTls is None:
            raise ConfigError("brokerServicePort and brokerServicePortTls are both empty: clients could not connect")

    def apply(self, settings: Mapping[str, str], check: Check | None = None) -> None:
        """Set keys from their text form, as `apply_settings` does (for code and tests)."""
        apply_settings(self, [Setting(key, text, "") for key, text in settings.items()], check)


def magnetar_keys() -> frozenset[str]:
    """The keys magnetar implements: the fields of ServiceConfiguration."""
    return frozenset(item.name for item in fields(ServiceConfiguration))


def apply_settings(
    config: ServiceConfiguration, settings: Sequence[Setting], check: Check | None = None,
) -> list[Setting]:
    """Apply `settings` in order (a later one for the same key wins), validate, then `check`.

    Every unknown key and every bad value is reported in one ConfigError, each with
    its origin, so one start-up shows everything to fix. Returns the settings of
    Pulsar keys magnetar does not implement, which are otherwise ignored.
    """
    known = magnetar_keys()
    effective = {setting.key: setting for setting in settings}
    problems = [unknown_key(setting) for setting in settings if not is_known_key(setting.key)]
    types = get_type_hints(ServiceConfiguration)
    for setting in effective.values():
        if setting.key in known:
            try:
                _set(config, setting, types[setting.key])
            except ConfigError as exc:
                problems.append(_located(setting.origin, str(exc)))
    if problems:
        raise ConfigError(problems[0] if len(problems) == 1 else
                          f"{len(problems)} problems:\n  " + "\n  ".join(problems))
    try:
        config.validate()
        if check is not None:
            check(config)
    except ConfigError as exc:
        raise ConfigError(_with_origins(str(exc), effective)) from None
    return [setting for setting in settings if setting.key not in known]


def is_known_key(key: str) -> bool:
    """Whether `key` is magnetar's or was a key of some Pulsar release.

    Pulsar's 600-odd keys are loaded only for a key that is not magnetar's: a start-up
    with magnetar's keys alone does not read them.
    """
    if key in magnetar_keys():
        return True
    from magnetar.broker.config.pulsar_keys import is_pulsar_key  # noqa: PLC0415 (see above)

    return is_pulsar_key(key)


def unknown_key(setting: Setting) -> str:
    """The report of a key neither magnetar nor any Pulsar release has, with the nearest real keys."""
    from magnetar.broker.config.pulsar_keys import PULSAR_BROKER_KEYS  # noqa: PLC0415 (see is_known_key)

    message = f"unknown configuration key {setting.key!r} (a key of neither magnetar nor any Pulsar release)"
    hint = did_you_mean(setting.key, sorted(magnetar_keys() | PULSAR_BROKER_KEYS))
    if hint:
        message += f"; {hint}"
    return _located(setting.origin, message)


def _located(origin: str, message: str) -> str:
    return f"{origin}: {message}" if origin else message


def _with_origins(message: str, effective: Mapping[str, Setting]) -> str:
    """A validation message with where each key it names was set (validate knows no origins)."""
    named = [setting for key, setting in effective.items()
             if setting.origin and re.search(rf"\b{re.escape(key)}\b", message)]
    if not named:
        return message
    return f"{message}; {', '.join(f'{setting.key} set at {setting.origin}' for setting in named)}"


def _set(config: ServiceConfiguration, setting: Setting, kind: Any) -> None:
    """Set one key from its text; an empty value keeps the default, as in Pulsar.

    Pulsar's own files carry `key=` lines for settings whose default is computed
    (`managedLedgerCacheSizeMB=`, `numIOThreads=`); a number or a switch cannot be
    empty, so such a line means "the default" there and here.
    """
    text = setting.value.strip()
    if not text and kind is not str:
        if kind == list[str]:
            setattr(config, setting.key, [])
        elif kind == int | None:  # an optional port: empty turns it off
            setattr(config, setting.key, None)
        return
    setattr(config, setting.key, _convert(setting.key, text, kind))


def _convert(key: str, text: str, kind: Any) -> Any:
    """Parse a value by the key's declared type."""
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            return lowered == "true"
        if kind in (int, float):
            return kind(text)
        if kind == int | None:
            return int(text)
        if kind == list[str]:
            return [item.strip() for item in text.split(",") if item.strip()]
    except ValueError as exc:
        raise ConfigError(f"bad value {text!r} for {key}: {exc}") from exc
    return text
