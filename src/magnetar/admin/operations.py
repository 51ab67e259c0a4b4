"""Every admin route and the operation it performs, in Pulsar's terms (see
broker.auth.operations for what each operation needs).

The security middleware looks each request's route up here, and docs/security.md's table
of who may do what is generated from this table (scripts/security_table.py): a route
missing from it is refused with 403, and a test walks the router so that none is. Routes
added from above the admin API (the functions worker's) bring their operation along
(AdminServer.add_routes).
"""

from __future__ import annotations

from collections.abc import Iterable

from magnetar import web
from magnetar.broker.auth import operations as op
from magnetar.broker.auth.operations import Operation

Route = tuple[str, str]
"""(method, the route's canonical path: `/admin/v2/{domain}/{tenant}/...`)."""

TENANT = "/admin/v2/tenants/{tenant}"
NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
PERSISTENT = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
ANY_TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
SUBSCRIPTION = PERSISTENT + "/subscription/{subscription}"
SCHEMAS = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
TXNS = "/admin/v3/transactions"
TXN_TOPIC = "{tenant}/{namespace}/{topic}"
ALL_METHODS = "GET POST PUT DELETE"
#: Policies read and written at `{namespace}/{name}` and `{topic}/{name}`, by method.
NAMESPACE_POLICIES = {
    ALL_METHODS: ("messageTTL", "deduplication", "entryFilters", "maxProducersPerTopic", "maxConsumersPerTopic",
                  "maxConsumersPerSubscription", "maxUnackedMessagesPerConsumer", "subscriptionExpirationTime",
                  "delayedDelivery", "schemaCompatibilityStrategy", "schemaValidationEnforced",
                  "isAllowAutoUpdateSchema", "compactionThreshold", "encryptionRequired", "publishRate",
                  "replicatorDispatchRate"),
    "GET POST DELETE": ("retention",),
    "GET POST": ("replication",),
    "GET": ("backlogQuotaMap",),
    "POST DELETE": ("backlogQuota",),
}
TOPIC_POLICIES = {
    ALL_METHODS: ("deduplicationEnabled", "entryFilters", "maxProducers", "maxConsumers",
                  "maxConsumersPerSubscription", "maxUnackedMessagesOnConsumer", "maxMessageSize", "delayedDelivery",
                  "schemaCompatibilityStrategy", "schemaValidationEnforced", "compactionThreshold", "publishRate",
                  "replicatorDispatchRate"),
    "GET POST DELETE": ("messageTTL", "retention", "replication"),
    "GET": ("backlogQuotaMap",),
    "POST DELETE": ("backlogQuota",),
}


def _each(methods: str, paths: Iterable[str], operation: Operation) -> dict[Route, Operation]:
    return {(method, path): operation for method in methods.split() for path in paths}


def _policies(base: str, policies: dict[str, tuple[str, ...]], read: Operation,
              write: Operation) -> dict[Route, Operation]:
    table: dict[Route, Operation] = {}
    for methods, names in policies.items():
        for method in methods.split():
            table.update(_each(method, [f"{base}/{name}" for name in names], read if method == "GET" else write))
    return table


ROUTES: dict[Route, Operation] = {
    # the broker, the cluster, tenants
    **_each("GET", ["/metrics"], op.METRICS),
    **_each("GET", ["/", "/console/{file}"], op.CONSOLE),
    **_each("GET", ["/admin/v2/brokers/ready"], op.READY),
    **_each("GET", ["/admin/v2/brokers/version"], op.GET_VERSION),
    **_each("GET", ["/admin/v2/brokers/health"], op.HEALTH_CHECK),
    **_each("GET", ["/admin/v2/brokers/configuration/runtime"], op.LIST_RUNTIME_CONFIGURATIONS),
    **_each("GET", ["/admin/v2/brokers/{cluster}"], op.LIST_BROKERS),
    **_each("GET", ["/admin/v2/clusters"], op.LIST_CLUSTERS),
    **_each("GET", ["/admin/v2/clusters/{cluster}"], op.GET_CLUSTER),
    **_each("PUT", ["/admin/v2/clusters/{cluster}"], op.CREATE_CLUSTER),
    **_each("POST", ["/admin/v2/clusters/{cluster}"], op.UPDATE_CLUSTER),
    **_each("DELETE", ["/admin/v2/clusters/{cluster}"], op.DELETE_CLUSTER),
    **_each("GET", ["/admin/v2/tenants"], op.LIST_TENANTS),
    **_each("GET", [TENANT], op.GET_TENANT),
    **_each("PUT", [TENANT], op.CREATE_TENANT),
    **_each("POST", [TENANT], op.UPDATE_TENANT),
    **_each("DELETE", [TENANT], op.DELETE_TENANT),
    # namespaces
    **_each("GET", ["/admin/v2/namespaces/{tenant}"], op.LIST_NAMESPACES),
    **_each("PUT", [NAMESPACE], op.CREATE_NAMESPACE),
    **_each("DELETE", [NAMESPACE], op.DELETE_NAMESPACE),
    **_each("GET", [NAMESPACE], op.NAMESPACE_POLICY_READ),
    **_each("GET", [NAMESPACE + "/topics", "/admin/v2/{domain}/{tenant}/{namespace}"], op.GET_TOPICS),
    **_each("GET", [NAMESPACE + "/permissions"], op.GET_PERMISSION),
    **_each("POST", [NAMESPACE + "/permissions/{role}"], op.GRANT_PERMISSION),
    **_each("DELETE", [NAMESPACE + "/permissions/{role}"], op.REVOKE_PERMISSION),
    **_policies(NAMESPACE, NAMESPACE_POLICIES, op.NAMESPACE_POLICY_READ, op.NAMESPACE_POLICY_WRITE),
    # topics: what produce or consume permission allows
    **_each("GET", ["/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"], op.LOOKUP),
    **_each("GET", [ANY_TOPIC + "/partitions"], op.GET_METADATA),
    **_each("GET", [ANY_TOPIC + "/stats", ANY_TOPIC + "/partitioned-stats", PERSISTENT + "/internalStats"],
            op.GET_STATS),
    **_each("GET", [PERSISTENT + "/subscriptions"], op.GET_SUBSCRIPTIONS),
    **_each("GET", [PERSISTENT + "/examinemessage", PERSISTENT + "/ledger/{ledger}/entry/{entry}",
                    PERSISTENT + "/lastMessageId", PERSISTENT + "/getMessageIdByIndex",
                    PERSISTENT + "/messageid/{timestamp}",
                    SUBSCRIPTION + "/position/{n}"], op.PEEK_MESSAGES),
    **_each("POST", ["/topics/persistent/{tenant}/{namespace}/{topic}",
                     "/topics/persistent/{tenant}/{namespace}/{topic}/partitions/{partition}"], op.PRODUCE),
    **_each("PUT", [SUBSCRIPTION], op.SUBSCRIBE),
    **_each("DELETE", [SUBSCRIPTION], op.UNSUBSCRIBE),
    **_each("POST", [SUBSCRIPTION + "/skip/{count}", SUBSCRIPTION + "/skip_all"], op.SKIP),
    **_each("POST", [SUBSCRIPTION + "/expireMessages/{seconds}"], op.EXPIRE_MESSAGES),
    **_each("POST", [SUBSCRIPTION + "/resetcursor", SUBSCRIPTION + "/resetcursor/{timestamp}"], op.RESET_CURSOR),
    **_each("GET PUT", [SUBSCRIPTION + "/properties"], op.CONSUME),
    **_each("GET", [SUBSCRIPTION + "/replicatedSubscriptionStatus"], op.GET_REPLICATED_SUBSCRIPTION_STATUS),
    **_each("POST", [SUBSCRIPTION + "/replicatedSubscriptionStatus"], op.SET_REPLICATED_SUBSCRIPTION_STATUS),
    # topics: what only a tenant admin does
    **_each("PUT", [PERSISTENT, ANY_TOPIC + "/partitions"], op.CREATE_TOPIC),
    **_each("POST", [ANY_TOPIC + "/partitions"], op.TOPIC_POLICY_WRITE),
    **_each("DELETE", [ANY_TOPIC, ANY_TOPIC + "/partitions"], op.DELETE_TOPIC),
    **_each("PUT", [ANY_TOPIC + "/unload"], op.UNLOAD),
    **_each("POST", [PERSISTENT + "/terminate", PERSISTENT + "/terminate/partitions"], op.TERMINATE),
    **_each("POST", [PERSISTENT + "/trim"], op.TRIM_TOPIC),
    **_each("GET PUT", [PERSISTENT + "/compaction"], op.COMPACT),
    **_each("POST", [PERSISTENT + "/compaction/adopt"], op.COMPACT),
    **_each("GET", [ANY_TOPIC + "/permissions"], op.TOPIC_GET_PERMISSION),
    **_each("POST", [ANY_TOPIC + "/permissions/{role}"], op.TOPIC_GRANT_PERMISSION),
    **_each("DELETE", [ANY_TOPIC + "/permissions/{role}"], op.TOPIC_REVOKE_PERMISSION),
    **_policies(PERSISTENT, TOPIC_POLICIES, op.TOPIC_POLICY_READ, op.TOPIC_POLICY_WRITE),
    # schemas
    **_each("GET", [SCHEMAS + "/schema", SCHEMAS + "/schema/{version}", SCHEMAS + "/schemas"], op.GET_METADATA),
    **_each("POST", [SCHEMAS + "/version"], op.GET_METADATA),
    **_each("POST", [SCHEMAS + "/schema", SCHEMAS + "/compatibility"], op.SCHEMA_WRITE),
    **_each("DELETE", [SCHEMAS + "/schema"], op.SCHEMA_WRITE),
    # transactions (PIP-31): the coordinator's a super user's, a topic's its tenant admin's
    **_each("GET", [f"{TXNS}/coordinatorStats", f"{TXNS}/transactionMetadata/{{most}}/{{least}}",
                    f"{TXNS}/slowTransactions/{{timeout}}"], op.TRANSACTION_STATS),
    **_each("GET", [f"{TXNS}/transactionBufferStats/{TXN_TOPIC}",
                    f"{TXNS}/pendingAckStats/{TXN_TOPIC}/{{subscription}}",
                    f"{TXNS}/transactionInBufferStats/{TXN_TOPIC}/{{most}}/{{least}}",
                    f"{TXNS}/transactionInPendingAckStats/{TXN_TOPIC}/{{subscription}}/{{most}}/{{least}}"],
            op.TOPIC_TRANSACTION_STATS),
}


def route_of(request: web.Request) -> Route | None:
    """The table's key for a request (a HEAD is its GET): None when no route matched (404/405)."""
    if request.route is None:
        return None
    return request.route.method, request.route.canonical
