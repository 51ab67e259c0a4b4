"""Authentication and authorization under Pulsar's keys (see authentication, authorization)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration


def validate_auth_settings(config: ServiceConfiguration) -> None:
    """Refuse authentication settings no broker could run with, naming the key."""
