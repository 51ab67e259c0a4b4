"""Deprecated: `FunctionsAdmin` is `magnetar.admin_client.FunctionsAdmin` since the admin
client left the admin API's package (docs/functions.md showed this path).

Importing it warns once; the names are those of magnetar.admin_client.functions, unchanged."""

import warnings

from magnetar.admin_client.functions import FunctionsAdmin, multipart

warnings.warn("magnetar.admin.functions_client is deprecated: import FunctionsAdmin from magnetar.admin_client",
              DeprecationWarning, stacklevel=2)

__all__ = ["FunctionsAdmin", "multipart"]
