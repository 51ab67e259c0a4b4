"""What a role must hold for each thing it may ask, in Pulsar's terms: its TopicOperation,
NamespaceOperation, TenantOperation, cluster and broker operations, and the permission
Pulsar's default authorization provider requires for each (PulsarAuthorizationProvider;
the rules of its allowTopicOperationAsync and allowNamespaceOperationAsync).

The binary protocol's commands are mapped here (`COMMANDS`); the admin API's routes in
magnetar.admin.operations. Both tables are what the authorization code consults and what
docs/security.md's table is generated from, so the documentation cannot drift from the
checks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


class Need(enum.Enum):
    """Who may perform an operation, from the most open to the most closed."""

    PUBLIC = "anyone, always (the web console's page and scripts: they hold no data)"
    OPEN = "anyone (an authenticated role with authenticateMetricsEndpoint=true)"
    AUTHENTICATED = "any authenticated role"
    HOLDER = "the connection that holds the producer or consumer"
    LOOKUP = "produce or consume"
    PRODUCE = "produce"
    CONSUME = "consume"
    FUNCTIONS = "functions"
    TENANT_ADMIN = "a tenant admin"
    SUPER_USER = "a super user"


#: The permissions each Need is met by, besides tenant admins and super users.
GRANTS: dict[Need, frozenset[str]] = {
    Need.LOOKUP: frozenset({"produce", "consume"}),
    Need.PRODUCE: frozenset({"produce"}),
    Need.CONSUME: frozenset({"consume"}),
    Need.FUNCTIONS: frozenset({"functions"}),
}


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    """Pulsar's name for it (`TopicOperation.PEEK_MESSAGES`); magnetar's own where Pulsar has none."""
    need: Need

    @property
    def verb(self) -> str:
        """How a refusal says it: `TopicOperation.PEEK_MESSAGES` -> `peek messages`."""
        return self.name.rpartition(".")[2].lower().replace("_", " ")


def _topic(name: str, need: Need) -> Operation:
    return Operation(f"TopicOperation.{name}", need)


# -- topics: what produce or consume permission allows, and what only an admin does
LOOKUP = _topic("LOOKUP", Need.LOOKUP)
GET_METADATA = _topic("GET_METADATA", Need.LOOKUP)
GET_STATS = _topic("GET_STATS", Need.LOOKUP)
PRODUCE = _topic("PRODUCE", Need.PRODUCE)
CONSUME = _topic("CONSUME", Need.CONSUME)
SUBSCRIBE = _topic("SUBSCRIBE", Need.CONSUME)
UNSUBSCRIBE = _topic("UNSUBSCRIBE", Need.CONSUME)
GET_SUBSCRIPTIONS = _topic("GET_SUBSCRIPTIONS", Need.CONSUME)
PEEK_MESSAGES = _topic("PEEK_MESSAGES", Need.CONSUME)
SKIP = _topic("SKIP", Need.CONSUME)
EXPIRE_MESSAGES = _topic("EXPIRE_MESSAGES", Need.CONSUME)
RESET_CURSOR = _topic("RESET_CURSOR", Need.CONSUME)
GET_REPLICATED_SUBSCRIPTION_STATUS = _topic("GET_REPLICATED_SUBSCRIPTION_STATUS", Need.CONSUME)
SET_REPLICATED_SUBSCRIPTION_STATUS = _topic("SET_REPLICATED_SUBSCRIPTION_STATUS", Need.CONSUME)
TERMINATE = _topic("TERMINATE", Need.TENANT_ADMIN)
COMPACT = _topic("COMPACT", Need.TENANT_ADMIN)
UNLOAD = _topic("UNLOAD", Need.TENANT_ADMIN)
TRIM_TOPIC = _topic("TRIM_TOPIC", Need.TENANT_ADMIN)
TOPIC_GET_PERMISSION = _topic("GET_PERMISSION", Need.TENANT_ADMIN)
TOPIC_GRANT_PERMISSION = _topic("GRANT_PERMISSION", Need.TENANT_ADMIN)
TOPIC_REVOKE_PERMISSION = _topic("REVOKE_PERMISSION", Need.TENANT_ADMIN)
TOPIC_POLICY_READ = Operation("TopicPolicy READ", Need.TENANT_ADMIN)
TOPIC_POLICY_WRITE = Operation("TopicPolicy WRITE", Need.TENANT_ADMIN)
SCHEMA_WRITE = Operation("Schema WRITE", Need.TENANT_ADMIN)
"""Registering, deleting or testing a schema through the admin API (Pulsar: tenant admin)."""
# -- namespaces
GET_TOPICS = Operation("NamespaceOperation.GET_TOPICS", Need.CONSUME)
CREATE_TOPIC = Operation("NamespaceOperation.CREATE_TOPIC", Need.TENANT_ADMIN)
DELETE_TOPIC = Operation("NamespaceOperation.DELETE_TOPIC", Need.TENANT_ADMIN)
GET_PERMISSION = Operation("NamespaceOperation.GET_PERMISSION", Need.TENANT_ADMIN)
GRANT_PERMISSION = Operation("NamespaceOperation.GRANT_PERMISSION", Need.TENANT_ADMIN)
REVOKE_PERMISSION = Operation("NamespaceOperation.REVOKE_PERMISSION", Need.TENANT_ADMIN)
NAMESPACE_POLICY_READ = Operation("NamespacePolicy READ", Need.TENANT_ADMIN)
NAMESPACE_POLICY_WRITE = Operation("NamespacePolicy WRITE", Need.TENANT_ADMIN)
FUNCTIONS = Operation("NamespaceOperation.FUNCTIONS", Need.FUNCTIONS)
# -- tenants
LIST_NAMESPACES = Operation("TenantOperation.LIST_NAMESPACES", Need.TENANT_ADMIN)
CREATE_NAMESPACE = Operation("TenantOperation.CREATE_NAMESPACE", Need.TENANT_ADMIN)
DELETE_NAMESPACE = Operation("TenantOperation.DELETE_NAMESPACE", Need.TENANT_ADMIN)
LIST_TENANTS = Operation("TenantOperation.LIST_TENANTS", Need.SUPER_USER)
GET_TENANT = Operation("TenantOperation.GET_TENANT", Need.SUPER_USER)
CREATE_TENANT = Operation("TenantOperation.CREATE_TENANT", Need.SUPER_USER)
UPDATE_TENANT = Operation("TenantOperation.UPDATE_TENANT", Need.SUPER_USER)
DELETE_TENANT = Operation("TenantOperation.DELETE_TENANT", Need.SUPER_USER)
# -- the cluster and the broker
LIST_CLUSTERS = Operation("ClusterOperation.LIST_CLUSTERS", Need.AUTHENTICATED)
GET_CLUSTER = Operation("ClusterOperation.GET_CLUSTER", Need.SUPER_USER)
CREATE_CLUSTER = Operation("ClusterOperation.CREATE_CLUSTER", Need.SUPER_USER)
UPDATE_CLUSTER = Operation("ClusterOperation.UPDATE_CLUSTER", Need.SUPER_USER)
DELETE_CLUSTER = Operation("ClusterOperation.DELETE_CLUSTER", Need.SUPER_USER)
LIST_BROKERS = Operation("BrokerOperation.LIST_BROKERS", Need.SUPER_USER)
HEALTH_CHECK = Operation("BrokerOperation.HEALTH_CHECK", Need.SUPER_USER)
LIST_RUNTIME_CONFIGURATIONS = Operation("BrokerOperation.LIST_RUNTIME_CONFIGURATIONS", Need.SUPER_USER)
GET_VERSION = Operation("BrokerOperation.GET_VERSION", Need.AUTHENTICATED)
READY = Operation("BrokerOperation.READY", Need.AUTHENTICATED)
METRICS = Operation("metrics", Need.OPEN)
TRANSACTION_STATS = Operation("the transaction coordinator's stats", Need.SUPER_USER)
TOPIC_TRANSACTION_STATS = Operation("TopicOperation.GET_STATS of transactions", Need.TENANT_ADMIN)
CONSOLE = Operation("web console files", Need.PUBLIC)
"""The console's static files: what it shows it reads through the admin API, as the role signed in."""
# -- the binary protocol's own
CONNECT = Operation("connect", Need.AUTHENTICATED)
USE_HANDLE = Operation("use its producer or consumer", Need.HOLDER)
#: The transaction coordinator's commands (PIP-31): the coordinator holds each transaction to
#: the role that opened it (broker.transactions.coordinator).
TRANSACTION = Operation("open, add to and end its transactions", Need.AUTHENTICATED)

#: Every command a connection handles, and what it needs. Commands on a producer or
#: consumer need nothing more than holding it: its creation was checked, and a change of
#: permissions closes the handles that lost theirs (see broker.monitors.revalidation).
COMMANDS: dict[int, Operation] = {
    T.CONNECT: CONNECT,
    T.AUTH_RESPONSE: CONNECT,
    T.PING: CONNECT,
    T.PONG: CONNECT,
    T.PARTITIONED_METADATA: LOOKUP,
    T.LOOKUP: LOOKUP,
    T.GET_TOPICS_OF_NAMESPACE: GET_TOPICS,
    T.GET_SCHEMA: LOOKUP,
    T.GET_OR_CREATE_SCHEMA: PRODUCE,
    T.PRODUCER: PRODUCE,
    T.SUBSCRIBE: SUBSCRIBE,
    **dict.fromkeys((T.SEND, T.CLOSE_PRODUCER, T.FLOW, T.ACK, T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
                     T.CLOSE_CONSUMER, T.UNSUBSCRIBE, T.SEEK, T.GET_LAST_MESSAGE_ID, T.CONSUMER_STATS), USE_HANDLE),
    **dict.fromkeys((T.TC_CLIENT_CONNECT_REQUEST, T.NEW_TXN, T.ADD_PARTITION_TO_TXN, T.ADD_SUBSCRIPTION_TO_TXN,
                     T.END_TXN, T.END_TXN_ON_PARTITION, T.END_TXN_ON_SUBSCRIPTION), TRANSACTION),
}
