"""Who may call each admin route, written down as a user of Pulsar states it, apart from the
code's table (issue 40: the walk of every route derived its expected 401 and 403 from
admin.operations.ROUTES itself, so a route given the wrong operation, a produce-only role
allowed to delete a topic's schema, passed it).

The scene: tenants t1 and t2, each with its admin and a namespace `ns`; in t1/ns `app` may
produce and consume, `ingest` only produce, `reader` only consume; `t2-app` produces and
consumes in t2/ns only; `admin` is the super user. Every route the broker serves (the
functions worker's included) must have a row here, and is walked on t1 as each role and
without a token: 401 without one (but on the web console's files), 403 exactly where the row
says the role may not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import http
from security_helpers import admin_json, admin_routes, build_scene, client_as, route_body, route_url, scene_broker
from standalone import Standalone

from magnetar.functions.routes import ROUTES as FUNCTION_ROUTES

TOPIC = "persistent://t1/ns/probe"
SUPER = frozenset({"admin"})
ADMINS = SUPER | {"t1-admin"}
PRODUCERS = ADMINS | {"app", "ingest"}
CONSUMERS = ADMINS | {"app", "reader"}
USERS = ADMINS | {"app", "ingest", "reader"}  # produce or consume
ANYONE = USERS | {"t2-admin", "t2-app"}  # any authenticated role
ROLES = sorted(ANYONE)
EVERYONE = ANYONE | {None}  # without a token too

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC_PATH = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
ANY_DOMAIN = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
SUB = TOPIC_PATH + "/subscription/{subscription}"
SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
FUNCTION = "/admin/v3/functions/{tenant}/{namespace}/{name}"
TXNS = "/admin/v3/transactions"
#: The policies a namespace and a topic have, as pulsar-admin sets them: (name, methods).
NAMESPACE_POLICIES = [
    *((name, "GET POST PUT DELETE") for name in (
        "messageTTL", "deduplication", "entryFilters", "maxProducersPerTopic", "maxConsumersPerTopic",
        "maxConsumersPerSubscription", "maxUnackedMessagesPerConsumer", "subscriptionExpirationTime",
        "delayedDelivery", "schemaCompatibilityStrategy", "schemaValidationEnforced", "isAllowAutoUpdateSchema",
        "compactionThreshold", "encryptionRequired", "publishRate", "replicatorDispatchRate")),
    ("retention", "GET POST DELETE"), ("replication", "GET POST"), ("backlogQuotaMap", "GET"),
    ("backlogQuota", "POST DELETE"),
]
TOPIC_POLICIES = [
    *((name, "GET POST PUT DELETE") for name in (
        "deduplicationEnabled", "entryFilters", "maxProducers", "maxConsumers", "maxConsumersPerSubscription",
        "maxUnackedMessagesOnConsumer", "delayedDelivery", "schemaCompatibilityStrategy", "schemaValidationEnforced",
        "compactionThreshold", "maxMessageSize", "publishRate", "replicatorDispatchRate")),
    ("messageTTL", "GET POST DELETE"), ("retention", "GET POST DELETE"), ("replication", "GET POST DELETE"),
    ("backlogQuotaMap", "GET"),
    ("backlogQuota", "POST DELETE"),
]

MAY: dict[tuple[str, str], frozenset[str | None]] = {
    # the web console's files: the same for everyone, and no data in them
    ("GET", "/"): EVERYONE,
    ("GET", "/console/{file}"): EVERYONE,
    # the broker and the cluster: what monitoring asks is open to any role, the rest to the super user
    ("GET", "/metrics"): ANYONE,
    ("GET", "/admin/v2/brokers/ready"): ANYONE,
    ("GET", "/admin/v2/brokers/version"): ANYONE,
    ("GET", "/admin/v2/clusters"): ANYONE,
    ("GET", "/admin/v2/brokers/health"): SUPER,
    ("GET", "/admin/v2/brokers/configuration/runtime"): SUPER,
    ("GET", "/admin/v2/brokers/{cluster}"): SUPER,
    **{(method, "/admin/v2/clusters/{cluster}"): SUPER for method in ("GET", "PUT", "POST", "DELETE")},
    # tenants are the super user's
    ("GET", "/admin/v2/tenants"): SUPER,
    **{(method, "/admin/v2/tenants/{tenant}"): SUPER for method in ("GET", "PUT", "POST", "DELETE")},
    # a namespace, its permissions and policies are its tenant's admins'
    ("GET", "/admin/v2/namespaces/{tenant}"): ADMINS,
    **{(method, NS): ADMINS for method in ("GET", "PUT", "DELETE")},
    ("GET", NS + "/permissions"): ADMINS,
    **{(method, NS + "/permissions/{role}"): ADMINS for method in ("POST", "DELETE")},
    **{(method, f"{NS}/{name}"): ADMINS for name, methods in NAMESPACE_POLICIES for method in methods.split()},
    # listing a namespace's topics takes consume
    ("GET", NS + "/topics"): CONSUMERS,
    ("GET", "/admin/v2/{domain}/{tenant}/{namespace}"): CONSUMERS,
    # a topic's metadata, stats and schema: produce or consume
    ("GET", "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"): USERS,
    ("GET", ANY_DOMAIN + "/partitions"): USERS,
    ("GET", ANY_DOMAIN + "/stats"): USERS,
    ("GET", ANY_DOMAIN + "/partitioned-stats"): USERS,
    ("GET", TOPIC_PATH + "/internalStats"): USERS,
    ("GET", SCHEMA + "/schema"): USERS,
    ("GET", SCHEMA + "/schema/{version}"): USERS,
    ("GET", SCHEMA + "/schemas"): USERS,
    ("POST", SCHEMA + "/version"): USERS,
    # the REST producer: produce
    ("POST", "/topics/persistent/{tenant}/{namespace}/{topic}"): PRODUCERS,
    ("POST", "/topics/persistent/{tenant}/{namespace}/{topic}/partitions/{partition}"): PRODUCERS,
    # reading messages and working on subscriptions: consume
    ("GET", TOPIC_PATH + "/subscriptions"): CONSUMERS,
    ("GET", TOPIC_PATH + "/examinemessage"): CONSUMERS,
    ("GET", TOPIC_PATH + "/lastMessageId"): CONSUMERS,
    ("GET", TOPIC_PATH + "/getMessageIdByIndex"): CONSUMERS,
    ("GET", TOPIC_PATH + "/messageid/{timestamp}"): CONSUMERS,
    ("GET", TOPIC_PATH + "/ledger/{ledger}/entry/{entry}"): CONSUMERS,
    ("GET", SUB + "/position/{n}"): CONSUMERS,
    ("PUT", SUB): CONSUMERS,
    ("DELETE", SUB): CONSUMERS,
    ("POST", SUB + "/skip/{count}"): CONSUMERS,
    ("POST", SUB + "/skip_all"): CONSUMERS,
    ("POST", SUB + "/expireMessages/{seconds}"): CONSUMERS,
    ("POST", SUB + "/resetcursor"): CONSUMERS,
    ("POST", SUB + "/resetcursor/{timestamp}"): CONSUMERS,
    ("GET", SUB + "/properties"): CONSUMERS,
    ("PUT", SUB + "/properties"): CONSUMERS,
    ("GET", SUB + "/replicatedSubscriptionStatus"): CONSUMERS,
    ("POST", SUB + "/replicatedSubscriptionStatus"): CONSUMERS,
    # changing a topic, its schema, permissions and policies: its tenant's admins
    ("PUT", TOPIC_PATH): ADMINS,
    ("DELETE", ANY_DOMAIN): ADMINS,
    **{(method, ANY_DOMAIN + "/partitions"): ADMINS for method in ("PUT", "POST", "DELETE")},
    ("PUT", ANY_DOMAIN + "/unload"): ADMINS,
    ("POST", TOPIC_PATH + "/terminate"): ADMINS,
    ("POST", TOPIC_PATH + "/terminate/partitions"): ADMINS,
    ("POST", TOPIC_PATH + "/trim"): ADMINS,
    ("GET", TOPIC_PATH + "/compaction"): ADMINS,
    ("PUT", TOPIC_PATH + "/compaction"): ADMINS,
    ("POST", TOPIC_PATH + "/compaction/adopt"): ADMINS,
    ("GET", ANY_DOMAIN + "/permissions"): ADMINS,
    **{(method, ANY_DOMAIN + "/permissions/{role}"): ADMINS for method in ("POST", "DELETE")},
    **{(method, f"{TOPIC_PATH}/{name}"): ADMINS for name, methods in TOPIC_POLICIES for method in methods.split()},
    ("POST", SCHEMA + "/schema"): ADMINS,
    ("POST", SCHEMA + "/compatibility"): ADMINS,
    ("DELETE", SCHEMA + "/schema"): ADMINS,
    # functions: their tenant's admins (and roles granted `functions`, which none here is)
    ("GET", "/admin/v3/functions/{tenant}/{namespace}"): ADMINS,
    **{(method, FUNCTION): ADMINS for method in ("GET", "POST", "PUT", "DELETE")},
    ("GET", FUNCTION + "/download"): ADMINS,
    **{("GET", f"{FUNCTION}{instance}/{view}"): ADMINS for view in ("status", "stats")
       for instance in ("", "/{instance}")},
    **{("POST", f"{FUNCTION}{instance}/{verb}"): ADMINS for verb in ("start", "stop", "restart")
       for instance in ("", "/{instance}")},
    ("POST", FUNCTION + "/trigger"): ADMINS,
    **{(method, FUNCTION + "/state/{key}"): ADMINS for method in ("GET", "POST", "DELETE")},
    ("POST", FUNCTION + "/counter/{key}"): ADMINS,
    # transactions: the coordinator's stats the super user's, a topic's its tenant's admins (as in Pulsar)
    **{("GET", f"{TXNS}/{path}"): SUPER for path in ("coordinatorStats", "transactionMetadata/{most}/{least}",
                                                     "slowTransactions/{timeout}")},
    **{("GET", f"{TXNS}/{path}"): ADMINS for path in (
        "transactionBufferStats/{tenant}/{namespace}/{topic}",
        "pendingAckStats/{tenant}/{namespace}/{topic}/{subscription}",
        "transactionInBufferStats/{tenant}/{namespace}/{topic}/{most}/{least}",
        "transactionInPendingAckStats/{tenant}/{namespace}/{topic}/{subscription}/{most}/{least}")},
}
def _served_routes(data_dir: Path) -> set[tuple[str, str]]:
    """Every route of the admin API and of the functions worker, as (method, pattern without regexes)."""
    routes = admin_routes(data_dir)
    unregexed = (re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path) for _, path, _ in FUNCTION_ROUTES)
    return routes | {(method, path) for (method, _, _), path in zip(FUNCTION_ROUTES, unregexed, strict=True)}


def test_every_served_route_has_a_row(tmp_path):
    served = _served_routes(tmp_path)
    assert sorted(served - set(MAY)) == [], "routes nobody wrote down who may call"
    assert sorted(set(MAY) - served) == [], "rows for routes the broker does not serve"


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    with scene_broker(tmp_path_factory.mktemp("roles") / "data", signer, "authenticateMetricsEndpoint=true",
                      "transactionCoordinatorEnabled=true") as broker:  # else its routes answer 503
        build_scene(broker.admin_url, signer, "t2/ns")
        status, body = admin_json("POST", f"{broker.admin_url}/admin/v2/namespaces/t2/ns/permissions/t2-app",
                                  signer.bearer("admin"), ["produce", "consume"])
        assert status == 204, body
        client = client_as(broker.url, signer, "app")
        try:
            client.subscribe(TOPIC, "sub").close()
            client.create_producer(TOPIC, batching_enabled=False).send(b"m")
        finally:
            client.close()
        yield broker


def _scratch(broker: Standalone, signer) -> None:
    """t1/scratch as build_scene makes t1/ns, with its topic and subscription (again after a walk
    that deleted them)."""
    if admin_json("GET", f"{broker.admin_url}/admin/v2/namespaces/t1/scratch", signer.bearer("admin"))[0] == 404:
        build_scene(broker.admin_url, signer, "t1/scratch")
    base = f"{broker.admin_url}/admin/v2/persistent/t1/scratch/scratch"
    admin_json("PUT", base, signer.bearer("admin"))
    admin_json("PUT", f"{base}/subscription/sub", signer.bearer("admin"))


ORDER = {"GET": 0, "PUT": 1, "POST": 2, "DELETE": 3}


@pytest.mark.parametrize("role", [*ROLES, None], ids=[*ROLES, "no-token"])
def test_each_role_may_call_what_its_row_says(broker, signer, role):
    _scratch(broker, signer)
    problems = []
    for (method, path), allowed in sorted(MAY.items(), key=lambda row: ORDER[row[0][0]]):
        url = route_url(path, scratch=allowed <= ADMINS)  # t1/scratch: the roles hold their grants there too
        status, _, content = http(method, broker.admin_url + url, route_body(path),
                                  headers=signer.bearer(role) if role else {})
        expected = None if role in allowed else 401 if role is None else 403
        refused = status if status in (401, 403) else None
        if refused != expected or status >= 500:
            problems.append(f"{method} {url}: {status}, expected {expected or 'no refusal'} ({content[:120]!r})")
    assert problems == []
