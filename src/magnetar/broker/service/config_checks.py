"""The checks of a configuration that need the broker's features to tell.

ServiceConfiguration.validate (config/) checks what values alone say: a port in range,
a positive interval, one of the known modes. Whether a plugin loads, a certificate
parses or a retention policy holds only the feature knows; those checks are here, above
every feature, so that config/ imports none of them. Both run before anything starts
(`load_configuration(..., check=check_features)`, as `magnetar standalone` and
magnetar.testing load theirs), so a bad value stops the start with its key named
instead of failing the first client.
"""

from __future__ import annotations

from magnetar.broker.auth.authentication import load_provider
from magnetar.broker.compaction import load_compaction_service_factory
from magnetar.broker.config import ConfigError, ServiceConfiguration
from magnetar.broker.delayed_delivery import tracker_kind
from magnetar.broker.entry_filters import load_entry_filter
from magnetar.broker.policies.retention import InvalidRetentionError, broker_default
from magnetar.broker.tls import TlsConfigError, server_context
from magnetar.broker.transport.advertised_listeners import (
    ListenerConfigError,
    internal_listener_name,
    parse_advertised_listeners,
)


def check_features(config: ServiceConfiguration) -> None:
    """Every check below, in this order (TLS before the providers that rely on it)."""
    for check in (_delayed_delivery, _advertised_listeners, _entry_filters, _compaction, _retention, _tls,
                  _authentication):
        check(config)


def _delayed_delivery(config: ServiceConfiguration) -> None:
    try:
        tracker_kind(config.delayedDeliveryTrackerFactoryClassName)
    except ValueError as exc:
        raise ConfigError(f"delayedDeliveryTrackerFactoryClassName: {exc}") from None


def _advertised_listeners(config: ServiceConfiguration) -> None:
    try:
        internal_listener_name(parse_advertised_listeners(config.advertisedListeners), config.internalListenerName)
    except ListenerConfigError as exc:
        raise ConfigError(str(exc)) from None


def _entry_filters(config: ServiceConfiguration) -> None:
    for name in config.entryFilterNames:
        try:
            load_entry_filter(name)
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"entryFilterNames: {exc}") from None


def _compaction(config: ServiceConfiguration) -> None:
    try:
        load_compaction_service_factory(config.compactionServiceFactoryClassName)
    except (ValueError, ImportError) as exc:
        raise ConfigError(f"compactionServiceFactoryClassName: {exc}") from None


def _retention(config: ServiceConfiguration) -> None:
    try:
        broker_default(config).validate()
    except InvalidRetentionError as exc:
        raise ConfigError(f"defaultRetentionTimeInMinutes/defaultRetentionSizeInMB: {exc}") from None


def _tls(config: ServiceConfiguration) -> None:
    """Build the context once, so that a bad file or value stops the broker with the key
    named instead of failing every handshake."""
    if not config.tls_enabled:
        return
    try:
        server_context(config)
    except TlsConfigError as exc:
        raise ConfigError(str(exc)) from None


def _authentication(config: ServiceConfiguration) -> None:
    """Build every provider once, so a missing key or an unreadable key file stops the
    start with the setting named instead of refusing every client."""
    if not config.authenticationEnabled:
        if config.authorizationEnabled:
            raise ConfigError("authorizationEnabled=true needs authenticationEnabled=true: roles come from "
                              "authentication")
        return
    for name in config.authenticationProviders:
        try:
            load_provider(name, config)
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"authenticationProviders ({name}): {exc}") from None
