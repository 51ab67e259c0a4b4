"""Broker configuration under the key names of Pulsar's broker.conf.

A Pulsar user's existing broker.conf lines work as written; keys magnetar does
not know are refused at start-up (naming the key) rather than silently ignored,
so a typo never leaves a broker running with a setting the operator didn't get.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from magnetar.broker.advertised_listeners import (
    ListenerConfigError,
    internal_listener_name,
    parse_advertised_listeners,
)

#: Keys that appear in every Pulsar broker.conf but configure parts (ZooKeeper,
#: BookKeeper, clusters) that magnetar replaces; accepted and ignored.
_IGNORED_PULSAR_KEYS = frozenset(
    {
        "clusterName",
        "zookeeperServers",
        "configurationStoreServers",
        "metadataStoreUrl",
        "configurationMetadataStoreUrl",
        "bookkeeperClientTimeoutInSeconds",
        "managedLedgerDefaultEnsembleSize",
        "managedLedgerDefaultWriteQuorum",
        "managedLedgerDefaultAckQuorum",
        "brokerServicePortTls",
        "webServicePortTls",
        "functionsWorkerEnabled",
    }
)


class ConfigError(ValueError):
    """A configuration key or value that magnetar refuses; the message names the key."""


@dataclass(slots=True)
class ServiceConfiguration:
    """Every setting the broker reads, with Pulsar's name and (mostly) Pulsar's default."""

    bindAddress: str = "127.0.0.1"
    # what LOOKUP answers (see advertised_listeners): empty = the bind address, or the
    # host name when binding a wildcard address
    advertisedAddress: str = ""
    advertisedListeners: str = ""
    internalListenerName: str = ""
    brokerServicePort: int = 6650
    webServicePort: int = 8080
    maxMessageSize: int = 5 * 1024 * 1024
    keepAliveIntervalSeconds: int = 30
    # topics
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    # dispatch
    dispatcherMaxReadBatchSize: int = 100
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
    managedLedgerCacheSizeMB: int = 64
    journalSyncData: bool = True
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
    delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds: int = 300

    def validate(self) -> None:
        """Refuse values no broker could run with, naming the key."""
        if self.allowAutoTopicCreationType not in ("non-partitioned", "partitioned"):
            raise ConfigError(
                "allowAutoTopicCreationType must be 'non-partitioned' or 'partitioned', "
                f"not {self.allowAutoTopicCreationType!r}"
            )
        positive = ("maxMessageSize", "defaultNumPartitions", "dispatcherMaxReadBatchSize",
                    "managedLedgerMaxEntriesPerLedger", "managedLedgerMaxSizePerLedgerMbytes",
                    "managedLedgerMaxOpenFiles",
                    "delayedDeliveryTickTimeMillis", "keepAliveIntervalSeconds", "statsUpdateFrequencyInSecs",
                    "delayedDeliveryMinIndexCountPerBucket",
                    "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive, not {getattr(self, name)}")
        from magnetar.broker.delayed_delivery import tracker_kind  # noqa: PLC0415 (imports this module)

        try:
            tracker_kind(self.delayedDeliveryTrackerFactoryClassName)
        except ValueError as exc:
            raise ConfigError(f"delayedDeliveryTrackerFactoryClassName: {exc}") from None
        try:
            internal_listener_name(parse_advertised_listeners(self.advertisedListeners), self.internalListenerName)
        except ListenerConfigError as exc:
            raise ConfigError(str(exc)) from None
        for name in ("brokerServicePort", "webServicePort"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ConfigError(f"{name} must be a port number (0-65535), not {getattr(self, name)}")

    def apply(self, settings: Mapping[str, str]) -> None:
        """Set keys from their text form (broker.conf or `-c key=value`)."""
        types = get_type_hints(ServiceConfiguration)
        for key, text in settings.items():
            if key in _IGNORED_PULSAR_KEYS:
                continue
            if key not in types:
                raise ConfigError(f"unknown configuration key {key!r}")
            setattr(self, key, _convert(key, text, types[key]))
        self.validate()


def _convert(key: str, text: str, kind: Any) -> Any:
    """Parse a value by the key's declared type."""
    text = text.strip()
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            return lowered == "true"
        if kind in (int, float):
            return kind(text)
        if kind == list[str]:
            return [item.strip() for item in text.split(",") if item.strip()]
    except ValueError as exc:
        raise ConfigError(f"bad value {text!r} for {key}: {exc}") from exc
    return text


def parse_properties(lines: Iterable[str], origin: str) -> dict[str, str]:
    """Parse broker.conf's `key=value` lines (comments with #, blank lines allowed)."""
    settings: dict[str, str] = {}
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{origin}:{number}: expected key=value, got {line!r}")
        settings[key.strip()] = value
    return settings


def load_configuration(
    config_file: Path | None = None, overrides: Iterable[str] = ()
) -> ServiceConfiguration:
    """Defaults, then the file, then `-c key=value` overrides, in that order."""
    config = ServiceConfiguration()
    if config_file is not None:
        try:
            text = config_file.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc.strerror}") from exc
        config.apply(parse_properties(text.splitlines(), str(config_file)))
    config.apply(parse_properties(overrides, "-c"))
    return config
