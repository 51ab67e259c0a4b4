"""`AdminClient`: the admin REST API from Python scripts, as `pulsar-admin` offers it.

Blocking and dependency-free (the standard library's HTTP client), so a script or
the `magnetar admin` command line can use it anywhere. It speaks Pulsar's REST paths,
so it works against Apache Pulsar's brokers too, for what both implement.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from magnetar.credentials.authentication import Authentication
from magnetar.credentials.security import ClientSecurity
from magnetar.wire.topic_name import TopicName

DEFAULT_TIMEOUT_SECONDS = 30.0


class AdminError(RuntimeError):
    """The broker refused a request: `status` is the HTTP status, `reason` Pulsar's reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Message:
    """One message as the admin API returns it: the payload and the X-Pulsar-* headers."""

    data: bytes
    headers: dict[str, str]

    @property
    def message_id(self) -> str:
        return self.headers.get("X-Pulsar-Message-ID", "")

    @property
    def properties(self) -> dict[str, str]:
        prefix = "X-Pulsar-PROPERTY-"
        return {k[len(prefix):]: v for k, v in self.headers.items() if k.startswith(prefix)}


class AdminClient:
    """`authentication` is one of magnetar.credentials.authentication's; an https:// URL is checked against
    `tls_trust_certs_file_path` (else the system's CAs), with the official client's TLS options."""

    def __init__(self, service_http_url: str = "http://127.0.0.1:8080",
                 timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS, *, authentication: Authentication | None = None,
                 tls_trust_certs_file_path: str | None = None, tls_allow_insecure_connection: bool = False,
                 tls_validate_hostname: bool = False, tls_certificate: tuple[str, str] | None = None) -> None:
        """`tls_certificate`: (certificate file, key file) shown in the TLS handshake whatever the authentication."""
        self.url = service_http_url.rstrip("/")
        self.timeout = timeout_seconds
        self._authentication = authentication or Authentication()
        security = ClientSecurity(self._authentication, tls_trust_certs_file_path, tls_allow_insecure_connection,
                                  tls_validate_hostname, tls_certificate)
        self._ssl_context = security.ssl_context() if self.url.startswith("https") else None

    # -- transport
    def _request(self, method: str, path: str, body: Any = None, *, raw: bool = False,
                 query: dict[str, Any] | None = None,
                 content_type: str = "application/json") -> tuple[bytes, dict[str, str]]:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: _query_value(v) for k, v in query.items() if v is not None})
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {**({"Content-Type": content_type} if data is not None else {}),
                   **self._authentication.http_headers()}
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl_context) as response:
                return response.read(), dict(response.headers)
        except urllib.error.HTTPError as error:
            raise AdminError(error.code, _reason(error.read(), error.reason)) from None
        except urllib.error.URLError as error:
            raise AdminError(0, f"cannot reach {self.url}: {error.reason}") from None

    def _json(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        content, _ = self._request(method, path, body, query=query or None)
        return json.loads(content) if content else None

    # -- clusters and tenants
    def clusters(self) -> list[str]:
        return self._json("GET", "/admin/v2/clusters")

    def cluster(self, cluster: str) -> dict[str, Any]:
        return self._json("GET", f"/admin/v2/clusters/{_seg(cluster)}")

    def create_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        """`data`: Pulsar's ClusterData fields (serviceUrl, brokerServiceUrl, ...)."""
        self._json("PUT", f"/admin/v2/clusters/{_seg(cluster)}", data)

    def update_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        self._json("POST", f"/admin/v2/clusters/{_seg(cluster)}", data)

    def delete_cluster(self, cluster: str) -> None:
        self._json("DELETE", f"/admin/v2/clusters/{_seg(cluster)}")

    def tenants(self) -> list[str]:
        return self._json("GET", "/admin/v2/tenants")

    def tenant(self, tenant: str) -> dict[str, Any]:
        return self._json("GET", f"/admin/v2/tenants/{_seg(tenant)}")

    def create_tenant(self, tenant: str, admin_roles: list[str] | None = None,
                      allowed_clusters: list[str] | None = None) -> None:
        self._json("PUT", f"/admin/v2/tenants/{_seg(tenant)}",
                   {"adminRoles": admin_roles or [], "allowedClusters": allowed_clusters or []})

    def update_tenant(self, tenant: str, admin_roles: list[str] | None = None,
                      allowed_clusters: list[str] | None = None) -> None:
        self._json("POST", f"/admin/v2/tenants/{_seg(tenant)}",
                   {"adminRoles": admin_roles or [], "allowedClusters": allowed_clusters or []})

    def delete_tenant(self, tenant: str) -> None:
        self._json("DELETE", f"/admin/v2/tenants/{_seg(tenant)}")

    # -- namespaces
    def namespaces(self, tenant: str) -> list[str]:
        return self._json("GET", f"/admin/v2/namespaces/{_seg(tenant)}")

    def replication_clusters(self, namespace: str) -> list[str]:
        return self._json("GET", f"/admin/v2/namespaces/{_ns(namespace)}/replication")

    def set_replication_clusters(self, namespace: str, clusters: list[str]) -> None:
        self._json("POST", f"/admin/v2/namespaces/{_ns(namespace)}/replication", clusters)

    def create_namespace(self, namespace: str) -> None:
        self._json("PUT", f"/admin/v2/namespaces/{_ns(namespace)}")

    def delete_namespace(self, namespace: str) -> None:
        self._json("DELETE", f"/admin/v2/namespaces/{_ns(namespace)}")

    def namespace_policies(self, namespace: str) -> dict[str, Any]:
        return self._json("GET", f"/admin/v2/namespaces/{_ns(namespace)}")

    def permissions(self, namespace: str) -> dict[str, list[str]]:
        return self._json("GET", f"/admin/v2/namespaces/{_ns(namespace)}/permissions")

    def grant_permission(self, namespace: str, role: str, actions: list[str]) -> None:
        self._request("POST", f"/admin/v2/namespaces/{_ns(namespace)}/permissions/{_seg(role)}", actions)

    def revoke_permission(self, namespace: str, role: str) -> None:
        self._request("DELETE", f"/admin/v2/namespaces/{_ns(namespace)}/permissions/{_seg(role)}")

    def namespace_topics(self, namespace: str, mode: str = "PERSISTENT") -> list[str]:
        return self._json("GET", f"/admin/v2/namespaces/{_ns(namespace)}/topics", mode=mode)

    def get_namespace_message_ttl(self, namespace: str) -> int | None:
        return self.get_namespace_policy(namespace, "messageTTL")

    def set_namespace_message_ttl(self, namespace: str, seconds: int) -> None:
        self.set_namespace_policy(namespace, "messageTTL", seconds)

    def remove_namespace_message_ttl(self, namespace: str) -> None:
        self.remove_namespace_policy(namespace, "messageTTL")

    def get_namespace_policy(self, namespace: str, policy: str) -> Any:
        """Any namespace policy by the name of its path (`maxProducersPerTopic`, `delayedDelivery`, ...)."""
        return self._json("GET", f"/admin/v2/namespaces/{_ns(namespace)}/{policy}")

    def set_namespace_policy(self, namespace: str, policy: str, value: Any) -> None:
        self._json("POST", f"/admin/v2/namespaces/{_ns(namespace)}/{policy}", value)

    def remove_namespace_policy(self, namespace: str, policy: str) -> None:
        self._json("DELETE", f"/admin/v2/namespaces/{_ns(namespace)}/{policy}")
    def get_namespace_retention(self, namespace: str) -> dict[str, Any] | None:
        return self.get_namespace_policy(namespace, "retention")

    def set_namespace_retention(self, namespace: str, minutes: float, size_mb: int) -> None:
        self.set_namespace_policy(namespace, "retention", _retention(minutes, size_mb))

    def remove_namespace_retention(self, namespace: str) -> None:
        self.remove_namespace_policy(namespace, "retention")

    # -- topics
    def topics(self, namespace: str, *, non_persistent: bool = False) -> list[str]:
        domain = "non-persistent" if non_persistent else "persistent"
        return self._json("GET", f"/admin/v2/{domain}/{_ns(namespace)}")

    def create_topic(self, topic: str) -> None:
        self._json("PUT", _topic(topic))

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        self._json("PUT", _topic(topic, "partitions"), str(partitions).encode())

    def update_partitioned_topic(self, topic: str, partitions: int, *, local_only: bool = False) -> None:
        """`local_only`: Pulsar's updateLocalTopicOnly, what one cluster asks of another so the
        change is not propagated again."""
        self._json("POST", _topic(topic, "partitions"), str(partitions).encode(),
                   **({"updateLocalTopicOnly": True} if local_only else {}))

    def partitions(self, topic: str) -> int:
        return self._json("GET", _topic(topic, "partitions"))["partitions"]

    def delete_topic(self, topic: str, *, force: bool = False) -> None:
        self._json("DELETE", _topic(topic), force=force)

    def delete_partitioned_topic(self, topic: str, *, force: bool = False) -> None:
        self._json("DELETE", _topic(topic, "partitions"), force=force)

    def stats(self, topic: str) -> dict[str, Any]:
        return self._json("GET", _topic(topic, "stats"))

    def partitioned_stats(self, topic: str, *, per_partition: bool = False) -> dict[str, Any]:
        return self._json("GET", _topic(topic, "partitioned-stats"), perPartition=per_partition)

    def internal_stats(self, topic: str) -> dict[str, Any]:
        return self._json("GET", _topic(topic, "internalStats"))

    def last_message_id(self, topic: str) -> dict[str, int]:
        return self._json("GET", _topic(topic, "lastMessageId"))

    def terminate(self, topic: str) -> dict[str, int]:
        """The topic takes no more messages; returns its last message id."""
        return self._json("POST", _topic(topic, "terminate"))

    def terminate_partitioned_topic(self, topic: str) -> dict[str, dict[str, int]]:
        """Terminates every partition; their last message ids by partition index."""
        return self._json("POST", _topic(topic, "terminate/partitions"))
    def compact(self, topic: str) -> None:
        """Start compacting the topic (every partition of a partitioned one)."""
        self._json("PUT", _topic(topic, "compaction"))

    def compaction_status(self, topic: str) -> dict[str, Any]:
        """`{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": ..., "progress": 0..1}`."""
        return self._json("GET", _topic(topic, "compaction"))

    def adopt_compaction(self, topic: str, staging: str, horizon: tuple[int, int], base: tuple[int, int] | None,
                         entries: int) -> None:
        """Hand the broker a compaction staged beside the topic (magnetar's, see magnetar.spark.compact)."""
        body = {"staging": staging, "horizon": list(horizon), "base": None if base is None else list(base),
                "entries": entries}
        self._json("POST", _topic(topic, "compaction/adopt"), body)

    def get_compaction_threshold(self, topic: str) -> int | None:
        return self.get_topic_policy(topic, "compactionThreshold")

    def set_compaction_threshold(self, topic: str, threshold_bytes: int) -> None:
        self.set_topic_policy(topic, "compactionThreshold", threshold_bytes)

    def remove_compaction_threshold(self, topic: str) -> None:
        self.remove_topic_policy(topic, "compactionThreshold")

    def unload(self, topic: str) -> None:
        self._json("PUT", _topic(topic, "unload"))

    def examine_message(self, topic: str, initial_position: str = "latest", message_position: int = 1) -> Message:
        content, headers = self._request("GET", _topic(topic, "examinemessage"),
                                         query={"initialPosition": initial_position,
                                                "messagePosition": message_position})
        return Message(content, headers)

    def get_message_by_id(self, topic: str, ledger_id: int, entry_id: int) -> Message:
        content, headers = self._request("GET", _topic(topic, f"ledger/{ledger_id}/entry/{entry_id}"))
        return Message(content, headers)

    def get_message_ttl(self, topic: str) -> int | None:
        return self._json("GET", _topic(topic, "messageTTL"))

    def set_message_ttl(self, topic: str, seconds: int) -> None:
        self._json("POST", _topic(topic, "messageTTL"), messageTTL=seconds)

    def get_topic_policy(self, topic: str, policy: str) -> Any:
        """Any topic policy by the name of its path (`maxProducers`, `delayedDelivery`, ...)."""
        return self._json("GET", _topic(topic, policy))

    def set_topic_policy(self, topic: str, policy: str, value: Any) -> None:
        self._json("POST", _topic(topic, policy), value)

    def remove_topic_policy(self, topic: str, policy: str) -> None:
        self._json("DELETE", _topic(topic, policy))

    def get_retention(self, topic: str) -> dict[str, Any] | None:
        return self.get_topic_policy(topic, "retention")

    def set_retention(self, topic: str, minutes: float, size_mb: int) -> None:
        self.set_topic_policy(topic, "retention", _retention(minutes, size_mb))

    def remove_retention(self, topic: str) -> None:
        self.remove_topic_policy(topic, "retention")

    def topic_replication_clusters(self, topic: str) -> list[str] | None:
        """The topic's own replication clusters (None: it follows its namespace's)."""
        return self.get_topic_policy(topic, "replication")

    def set_topic_replication_clusters(self, topic: str, clusters: list[str]) -> None:
        self.set_topic_policy(topic, "replication", clusters)

    def remove_topic_replication_clusters(self, topic: str) -> None:
        self.remove_topic_policy(topic, "replication")

    def trim_topic(self, topic: str) -> None:
        self._json("POST", _topic(topic, "trim"))

    # -- subscriptions
    def subscriptions(self, topic: str) -> list[str]:
        return self._json("GET", _topic(topic, "subscriptions"))

    def create_subscription(self, topic: str, subscription: str, message_id: tuple[int, int] | None = None) -> None:
        body = None if message_id is None else {"ledgerId": message_id[0], "entryId": message_id[1]}
        self._json("PUT", _subscription(topic, subscription), body)

    def delete_subscription(self, topic: str, subscription: str, *, force: bool = False) -> None:
        self._json("DELETE", _subscription(topic, subscription), force=force)

    def skip(self, topic: str, subscription: str, count: int) -> None:
        self._json("POST", _subscription(topic, subscription, f"skip/{count}"))

    def clear_backlog(self, topic: str, subscription: str) -> None:
        self._json("POST", _subscription(topic, subscription, "skip_all"))

    def reset_cursor_to_time(self, topic: str, subscription: str, timestamp_ms: int) -> None:
        self._json("POST", _subscription(topic, subscription, f"resetcursor/{timestamp_ms}"))

    def reset_cursor_to_message_id(self, topic: str, subscription: str, ledger_id: int, entry_id: int) -> None:
        self._json("POST", _subscription(topic, subscription, "resetcursor"),
                   {"ledgerId": ledger_id, "entryId": entry_id})

    def set_replicated_subscription_status(self, topic: str, subscription: str, enabled: bool) -> None:
        """Mirror the subscription's position to the topic's other clusters (PIP-33), or stop."""
        self._json("POST", _subscription(topic, subscription, "replicatedSubscriptionStatus"), enabled)

    def replicated_subscription_status(self, topic: str, subscription: str) -> dict[str, bool]:
        """Per topic (each partition of a partitioned one), whether the subscription is replicated."""
        return self._json("GET", _subscription(topic, subscription, "replicatedSubscriptionStatus"))

    def expire_messages(self, topic: str, subscription: str, seconds: int) -> None:
        self._json("POST", _subscription(topic, subscription, f"expireMessages/{seconds}"))

    def peek_messages(self, topic: str, subscription: str, count: int = 1) -> list[Message]:
        """The first `count` messages of the subscription's backlog, left unacknowledged."""
        messages = []
        for n in range(1, count + 1):
            try:
                content, headers = self._request("GET", _subscription(topic, subscription, f"position/{n}"))
            except AdminError as error:
                if error.status == 404 and messages:
                    break
                raise
            messages.append(Message(content, headers))
        return messages

    # -- brokers
    def version(self) -> str:
        return self._request("GET", "/admin/v2/brokers/version")[0].decode()

    def healthcheck(self) -> None:
        self._request("GET", "/admin/v2/brokers/health")

    def runtime_configuration(self) -> dict[str, str]:
        return self._json("GET", "/admin/v2/brokers/configuration/runtime")

    # -- schemas (/admin/v2/schemas/...)
    def get_schema(self, topic: str, version: int | None = None) -> dict[str, Any]:
        """The latest schema, or `version`: {version, type, timestamp, data, properties}."""
        return self._json("GET", _schemas(topic, "schema" if version is None else f"schema/{version}"))

    def get_all_schemas(self, topic: str) -> list[dict[str, Any]]:
        return self._json("GET", _schemas(topic, "schemas"))["getSchemaResponses"]

    def upload_schema(self, topic: str, payload: dict[str, Any]) -> int:
        """Register `payload` ({type, schema, properties}); its version."""
        return self._json("POST", _schemas(topic, "schema"), payload)["version"]["version"]

    def delete_schema(self, topic: str, *, force: bool = False) -> int:
        return self._json("DELETE", _schemas(topic, "schema"), force=force)["version"]

    def test_schema_compatibility(self, topic: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", _schemas(topic, "compatibility"), payload)


def _retention(minutes: float, size_mb: int) -> dict[str, float]:
    """Pulsar's RetentionPolicies JSON."""
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}


def _seg(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _ns(namespace: str) -> str:
    tenant, _, local = namespace.partition("/")
    if not tenant or not local:
        raise ValueError(f"{namespace!r} is not a namespace (tenant/namespace)")
    return f"{_seg(tenant)}/{_seg(local)}"


def _schemas(topic: str, suffix: str) -> str:
    name = TopicName.parse(topic)
    return f"/admin/v2/schemas/{_seg(name.tenant)}/{_seg(name.namespace)}/{_seg(name.local_name)}/{suffix}"


def _topic(topic: str, suffix: str = "") -> str:
    name = TopicName.parse(topic)
    path = f"/admin/v2/{name.domain}/{_seg(name.tenant)}/{_seg(name.namespace)}/{_seg(name.local_name)}"
    return f"{path}/{suffix}" if suffix else path


def _subscription(topic: str, subscription: str, suffix: str = "") -> str:
    path = _topic(topic, f"subscription/{_seg(subscription)}")
    return f"{path}/{suffix}" if suffix else path


def _query_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _reason(body: bytes, fallback: str) -> str:
    try:
        return str(json.loads(body)["reason"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace").strip() or fallback
