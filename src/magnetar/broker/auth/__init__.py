"""Authentication and authorization under Pulsar's keys (see authentication, session,
authorization)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration


def validate_auth_settings(config: ServiceConfiguration) -> None:
    """Build every provider once, so a missing key or an unreadable key file stops the
    start with the setting named instead of refusing every client."""
    from magnetar.broker.auth.authentication import load_provider  # noqa: PLC0415 (config imports this module)
    from magnetar.broker.config import ConfigError  # noqa: PLC0415 (config imports this module)

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
