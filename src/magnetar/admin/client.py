"""Deprecated: `AdminClient` is `magnetar.admin_client.AdminClient` since the admin client left
the admin API's package (docs/broker.md showed this path, so scripts use it).

Importing it warns once; the names are those of magnetar.admin_client, unchanged."""

import warnings

from magnetar.admin_client.client import DEFAULT_TIMEOUT_SECONDS, AdminClient, AdminError, Message

warnings.warn("magnetar.admin.client is deprecated: import AdminClient from magnetar.admin_client",
              DeprecationWarning, stacklevel=2)

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "AdminClient", "AdminError", "Message"]
