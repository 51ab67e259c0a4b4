"""The admin REST API's client: `AdminClient` (pulsar-admin's tenants, namespaces, topics,
schemas and brokers verbs) and `FunctionsAdmin` (its `functions` verbs), for scripts, the
`magnetar admin` command and the Spark jobs. Pulsar's own is PulsarAdmin
(org.apache.pulsar.client.admin). Both speak Pulsar's REST paths, so they work against
Apache Pulsar's brokers as well as magnetar's.

Layering: beside magnetar.broker, magnetar.client and magnetar.web, none of which it imports:
the standard library's HTTP client, magnetar.credentials (authentication, TLS options) and
magnetar.wire (topic names) are all it needs, so a script administering a broker loads no
broker, no binary client and no asyncio. Not inside magnetar.client, whose package import
loads the binary client (its blocking facade and asyncio core) that the admin client never
uses. Enforced by import-linter (pyproject.toml).
"""

from magnetar.admin_client.client import AdminClient, AdminError, Message
from magnetar.admin_client.functions import FunctionsAdmin

__all__ = ["AdminClient", "AdminError", "FunctionsAdmin", "Message"]
