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
from magnetar.broker.config.rules import NOT_EMPTY, PORT, POSITIVE, NotNegative, OneOf, key
from magnetar.schemas.model import CompatibilityStrategy
from magnetar.spelling import did_you_mean


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
    brokerServicePort: int | None = key(6650, PORT, "the pulsar:// port (0: any free one)")
    webServicePort: int | None = key(8080, PORT, "the admin API's http:// port")
    # TLS (see broker.tls): pulsar+ssl:// and https:// on their own ports
    brokerServicePortTls: int | None = key(None, PORT, "the pulsar+ssl:// port")
    webServicePortTls: int | None = key(None, PORT, "the admin API's https:// port")
    tlsCertificateFilePath: str = ""
    tlsKeyFilePath: str = ""
    tlsTrustCertsFilePath: str = ""
    tlsRequireTrustedClientCertOnConnect: bool = False
    tlsAllowInsecureConnection: bool = False
    tlsProtocols: list[str] = field(default_factory=list)
    tlsCiphers: list[str] = field(default_factory=list)
    tlsCertRefreshCheckDurationSec: int = key(300, POSITIVE, "how often the certificate files are read again")
    tlsHandshakeTimeoutSeconds: float = key(
        10.0, POSITIVE, "magnetar's own: a TLS handshake must end within this, or the connection is dropped")
    # authentication and authorization (see broker.auth), Pulsar's keys and defaults
    authenticationEnabled: bool = False
    authenticationProviders: list[str] = field(default_factory=list)
    authenticationRefreshCheckSeconds: int = key(
        60, POSITIVE, "how often the credentials of open connections are checked for expiry")
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
    webServiceRequestTimeoutSeconds: int = key(
        30, POSITIVE, "magnetar's own: an admin request (its body included) must end within this, its answer be "
        "taken by the client within it too, and a new connection send its first request's headers")
    maxHttpServerConnections: int = key(
        2048, NotNegative("no limit"), "admin API connections at once (Pulsar's key and default): past it, closed "
        "at once")
    # magnetar's own: the web console (magnetar.console) at `/` of the admin API's ports; off, `/` answers 404
    webConsoleEnabled: bool = True
    maxMessageSize: int = key(5 * 1024 * 1024, POSITIVE, "the largest entry a producer may send, in bytes")
    keepAliveIntervalSeconds: int = key(
        30, POSITIVE, "how often connections are pinged: one that has not answered (or sent CONNECT) by the next "
        "time is closed")
    # connection limits (Pulsar's keys and defaults)
    brokerMaxConnections: int = key(0, NotNegative("no limit"), "client connections at once")
    brokerMaxConnectionsPerIp: int = key(0, NotNegative("no limit"), "client connections at once from one address")
    maxMessagePublishBufferSizeInMB: int = key(
        64, POSITIVE, "bytes of frames received in part, over all connections (see "
        "broker.transport.connection_controller); Pulsar's default is half the JVM's direct memory, which has no "
        "Python equivalent")
    # topics
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = key(
        "non-partitioned", OneOf(("non-partitioned", "partitioned")), "what a topic created on first use is")
    defaultNumPartitions: int = key(1, POSITIVE, "the partitions of a partitioned topic created on first use")
    maxNumPartitionsPerPartitionedTopic: int = key(
        1024, NotNegative("no limit"), "Pulsar's default is 0 (no limit). A client that may create topics could "
        "then ask for a trillion partitions, and every partition is a managed ledger that listings name one by "
        "one; 1024 is far beyond what one standalone serves well. 0 still means no limit up to the broker's "
        "absolute ceiling (65536)")
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
    # the publish rate of a topic whose namespace and topic set none (Pulsar's keys and
    # defaults; 0 = no limit), broker.topics.publish_rate
    maxPublishRatePerTopicInMessages: int = 0
    maxPublishRatePerTopicInBytes: int = 0
    # schema registry (broker.schema_registry): the strategy when neither topic nor namespace
    # sets one, whether new schemas may be added, whether a producer without a schema may use a
    # topic that has one (Pulsar's keys and defaults)
    schemaCompatibilityStrategy: str = key(
        "FULL", OneOf(tuple(strategy.value for strategy in CompatibilityStrategy), fold_case=True),
        "the compatibility strategy of topics whose namespace sets none")
    isAllowAutoUpdateSchemaEnabled: bool = True
    isSchemaValidationEnforced: bool = False
    schemaMaxFields: int = key(
        10000, POSITIVE, "magnetar's own: an Avro definition's fields, union branches and symbols at most (what "
        "parsing and comparing it cost grows with; schemas.definitions.avro_members)")
    # dispatch
    dispatcherMaxReadBatchSize: int = key(100, POSITIVE, "entries one read of a dispatcher takes at most")
    dispatcherMaxReadSizeBytes: int = key(
        5 * 1024 * 1024, POSITIVE, "entry bytes one read may take (at least one entry is read): without it a "
        "consumer's permits, counted in messages, let 100 reads of 10,000-message batches (a GB) go at once")
    dispatcherMaxRoundRobinBatchSize: int = 20
    subscriptionRedeliveryTrackerEnabled: bool = True
    # magnetar honours ack_set by default: Pulsar's default (false) turns a
    # partial batch ack into a whole-entry ack, which loses messages on redelivery.
    acknowledgmentAtBatchIndexLevelEnabled: bool = True
    subscriptionKeySharedUseConsistentHashing: bool = True
    # storage
    managedLedgerMaxEntriesPerLedger: int = key(50000, POSITIVE, "a ledger rolls over at this many entries")
    managedLedgerMaxSizePerLedgerMbytes: int = key(2048, POSITIVE, "a ledger rolls over at this size")
    managedLedgerMaxLedgerRolloverTimeMinutes: float = key(240.0, POSITIVE, "a ledger rolls over at this age")
    managedLedgerMinLedgerRolloverTimeMinutes: float = key(
        10.0, NotNegative(), "a full ledger keeps taking entries until this old (Pulsar's default; Pulsar takes "
        "whole minutes, fractions are accepted so tests can use small values)")
    # retention of consumed data (see broker.policies.retention): -1 = no limit; 0 and 0 delete
    # what every subscription has consumed. Minutes may be fractional (Pulsar: whole).
    defaultRetentionTimeInMinutes: float = 0.0
    defaultRetentionSizeInMB: int = 0
    retentionCheckIntervalInSeconds: int = key(120, POSITIVE, "how often consumed data is trimmed to the retention")
    managedLedgerCacheSizeMB: int = 64
    managedLedgerCacheEvictionTimeThresholdMillis: int = key(
        1000, POSITIVE, "cached entries older than this are dropped (Pulsar's default), checked at every append "
        "and every managedLedgerCacheEvictionIntervalMs")
    managedLedgerCacheEvictionIntervalMs: int = key(
        1000, POSITIVE, "Pulsar checks every 10 ms; here the timer only matters to an idle broker (a busy one "
        "evicts as it appends), and waking a Python process 100 times a second cost an idle broker 1.2% of a core "
        "(0.1% at 1 s)")
    journalSyncData: bool = True
    journalMaxGroupWaitMSec: float = key(
        1.0, NotNegative(), "the journal's group commit (BookKeeper's key, 1 ms in Pulsar's standalone.conf): how "
        "long the first append of a group may wait for others to share its fsync")
    managedLedgerMaxOpenFiles: int = key(
        512, POSITIVE, "magnetar's own key (broker.conf has none; BookKeeper's bookie has openFileLimit): ledger "
        "files held open at once, closed least recently used first and reopened on demand. Half a common soft "
        "limit of 1024, so connections keep the other half even where the limit cannot be raised; two files per "
        "topic being written")
    # PIP-70
    brokerEntryMetadataInterceptors: list[str] = field(default_factory=list)
    exposingBrokerEntryMetadataToClientEnabled: bool = False
    # magnetar's own key: the index of a partition's first message (Pulsar: 0).
    brokerEntryMetadataIndexBase: int = 0
    statsUpdateFrequencyInSecs: int = key(
        60, POSITIVE, "how often rates in stats and /metrics are worked out (Pulsar's default)")
    # entry filters (PIP-105, see broker.entry_filters): plugin names of the
    # magnetar.entry_filters entry-point group; the directory of Pulsar's NAR files means
    # nothing here and is accepted and ignored
    entryFilterNames: list[str] = field(default_factory=list)
    entryFiltersDirectory: str = ""
    allowOverrideEntryFilters: bool = False
    dispatcherFilterRescheduledMessageDelay: int = key(
        1000, POSITIVE, "ms before what a filter answered RESCHEDULE is read again")
    # backlog quotas (Pulsar's keys and defaults: -1 = no limit)
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: int = key(60, POSITIVE, "how often backlogs are held to their quotas")
    backlogQuotaDefaultLimitBytes: int = -1
    backlogQuotaDefaultLimitSecond: int = -1
    backlogQuotaDefaultRetentionPolicy: str = key(
        "producer_request_hold", OneOf(("producer_request_hold", "producer_exception", "consumer_backlog_eviction")),
        "what a quota no namespace or topic sets does when exceeded (broker.policies.backlog_quota)")
    # inactive topics and subscriptions (see broker.monitors.inactivity; Pulsar's keys, and Pulsar's
    # defaults except brokerDeleteInactiveTopicsEnabled, which Pulsar turns on)
    brokerDeleteInactiveTopicsEnabled: bool = False
    brokerDeleteInactiveTopicsFrequencySeconds: int = key(60, POSITIVE, "how often inactive topics are looked for")
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int = 60
    brokerDeleteInactiveTopicsMode: str = key(
        "delete_when_no_subscriptions", OneOf(("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")),
        "which inactive topics go: without subscriptions, or also those whose subscriptions have read everything")
    subscriptionExpirationTimeMinutes: float = 0.0  # Pulsar takes whole minutes; fractions are accepted
    subscriptionExpiryCheckIntervalInMinutes: float = key(
        5.0, POSITIVE, "how often subscriptions are held to their expiration time")
    # end-to-end encryption: refuse producers that do not encrypt (the namespace policy
    # encryption_required refuses their messages too)
    encryptionRequireOnProducer: bool = False
    # geo-replication (see docs/scaling.md): this cluster's name (Pulsar's standalone.conf sets
    # `standalone`), the prefix of replicators' cursors and producers, and how many entries one
    # replicator has on the wire to its remote at most
    clusterName: str = key("standalone", NOT_EMPTY,
                           "this broker's cluster: what replicated messages say they came from")
    replicatorPrefix: str = key("pulsar.repl", NOT_EMPTY,
                                "the prefix of replicators' cursor and producer names")
    replicationProducerQueueSize: int = key(1000, POSITIVE, "entries a replicator sends before a receipt comes back")
    replicationStartAt: str = key("latest", OneOf(("latest", "earliest")),
                                  "where a new replicator starts: after the topic's last entry, or at its first")
    # a replicator creates its topic on the remote (partitioned as here) through the remote's
    # admin API (serviceUrl) before it produces
    createTopicToRemoteClusterForReplication: bool = True
    # what each replicator sends at most a second when neither its topic nor its namespace sets a
    # replicatorDispatchRate (Pulsar's keys and defaults; 0 = no limit)
    dispatchThrottlingRatePerReplicatorInMsg: int = 0
    dispatchThrottlingRatePerReplicatorInByte: int = 0
    # the broker as a client of remote clusters (replication.remote_security), Pulsar's keys and
    # defaults: what a cluster's own ClusterData does not set. The authentication is used only
    # with authenticationEnabled, as Pulsar's replication client does
    brokerClientAuthenticationPlugin: str = "org.apache.pulsar.client.impl.auth.AuthenticationDisabled"
    brokerClientAuthenticationParameters: str = ""
    brokerClientTlsEnabled: bool = False
    brokerClientTrustCertsFilePath: str = ""
    brokerClientCertificateFilePath: str = ""
    brokerClientKeyFilePath: str = ""
    tlsHostnameVerificationEnabled: bool = False
    # replicated subscriptions (PIP-33, magnetar.replication.subscriptions): snapshots of the
    # topic's position in every cluster, taken while a replicated subscription exists
    enableReplicatedSubscriptions: bool = True
    replicatedSubscriptionsSnapshotFrequencyMillis: int = key(
        1000, POSITIVE, "how often a topic with replicated subscriptions starts a snapshot")
    replicatedSubscriptionsSnapshotTimeoutSeconds: int = key(
        30, POSITIVE, "how long a snapshot waits for the other clusters' answers")
    replicatedSubscriptionsSnapshotMaxCachedPerSubscription: int = key(
        10, POSITIVE, "snapshots a replicated subscription keeps ahead of its mark-delete position")
    # deduplication (Pulsar's keys and defaults)
    brokerDeduplicationEnabled: bool = False
    brokerDeduplicationEntriesInterval: int = key(
        1000, POSITIVE, "appends between two snapshots of the deduplication state")
    # transactions (PIP-31, broker.transactions): off until the feature is complete
    transactionCoordinatorEnabled: bool = False
    # Pulsar's default is 0 (no limit); magnetar's bounds what forgotten or hostile
    # NEW_TXNs can pin in memory (about 1 KB each) and in its timers
    maxActiveTransactionsPerCoordinator: int = key(
        50_000, NotNegative("no limit"), "open transactions a coordinator keeps at once")
    transactionBufferSnapshotMaxTransactionCount: int = key(
        1000, POSITIVE, "transactions ended in a topic between two snapshots of its transaction buffer")
    transactionBufferSnapshotMinTimeInMillis: int = key(
        5000, POSITIVE, "milliseconds after which a transaction's end snapshots the topic's buffer")
    # message expiry
    ttlDurationDefaultInSeconds: int = 0
    messageExpiryCheckIntervalInMinutes: float = key(5.0, POSITIVE, "how often topics are held to their message TTL")
    # PIP-26
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = key(1000, POSITIVE, "how often the delayed-delivery trackers look at the time")
    # magnetar never delivers early by default: Pulsar's default (false) lets a
    # message out up to one tick before deliver_at_time, its users' top complaint.
    isDelayedDeliveryDeliverAtTimeStrict: bool = True
    delayedDeliveryMaxDelayInMillis: int = 0
    delayedDeliveryTrackerFactoryClassName: str = (
        "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory"
    )
    # bucket tracker: entries buffered before they are sealed into segments, and bucket width
    delayedDeliveryMinIndexCountPerBucket: int = key(50000, POSITIVE, "entries buffered before they are sealed")
    # compaction (see broker.compaction)
    brokerServiceCompactionMonitorIntervalInSeconds: int = key(
        60, POSITIVE, "how often backlogs are held to the compaction threshold")
    brokerServiceCompactionThresholdInBytes: int = key(
        0, NotNegative("never"), "the backlog past which a topic is compacted")
    topicCompactionRetainNullKey: bool = False
    compactionServiceFactoryClassName: str = "org.apache.pulsar.compaction.PulsarCompactionServiceFactory"
    # Pulsar Functions (magnetar.functions): the worker runs inside the standalone, on by default there
    functionsWorkerEnabled: bool = False
    # magnetar's own, in the functions worker's style: how instances are isolated (auto: a bubblewrap
    # sandbox where it works, saying loudly when it does not; bubblewrap: only that; none: Pulsar's
    # process runtime), and the OS user they run as when the broker runs as root (docs/functions.md)
    functionInstanceIsolation: str = key(
        "auto", OneOf(("auto", "bubblewrap", "none")), "how function instances are isolated (functions.sandbox)")
    functionInstanceUser: str = "nobody"
    delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds: int = key(
        300, POSITIVE, "the width of a delayed-delivery bucket")
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
    entryFormat: str = key(
        "pulsar", OneOf(("pulsar", "kafka")), "how Kafka producers' batches are stored: as Pulsar batches every "
        "client reads, or as the Kafka batches they came as")
    connectionMaxIdleMs: int = key(
        600_000, NotNegative(), "KoP's key for Kafka's connections.max.idle.ms: a Kafka connection with no request "
        "for this long is closed (0: never)")

    @property
    def tls_enabled(self) -> bool:
        """Whether a TLS port (pulsar+ssl:// or https://) is configured."""
        return self.brokerServicePortTls is not None or self.webServicePortTls is not None

    def validate(self) -> None:
        """Refuse values no broker could run with, naming the key: each field's own rule, then
        what two keys say together. What needs a feature to tell is checked by a `Check` (see
        apply_settings)."""
        for item in fields(self):
            rule = item.metadata.get("rule")
            problem = None if rule is None else rule.problem(item.name, getattr(self, item.name))
            if problem is not None:
                raise ConfigError(problem)
        if 0 < self.maxNumPartitionsPerPartitionedTopic < self.defaultNumPartitions:
            raise ConfigError(f"defaultNumPartitions ({self.defaultNumPartitions}) exceeds "
                              f"maxNumPartitionsPerPartitionedTopic ({self.maxNumPartitionsPerPartitionedTopic})")
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
