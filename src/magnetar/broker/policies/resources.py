"""Tenants and namespaces, kept in the metadata store (Pulsar's TenantResources and
NamespaceResources).

A topic lives in a namespace of a tenant, and nothing may be produced to or read from
a namespace that does not exist, as in Pulsar. A namespace's policies are stored as one
JSON object under the field names of Pulsar's `Policies`, so `GET .../namespaces/t/ns`
reads as a Pulsar user expects. Tenants list the clusters they may use (`allowedClusters`),
and a namespace replicates only to clusters its tenant allows (policies.clusters).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from magnetar.broker.errors import (
    InvalidResourceError,
    ResourceConflictError,
    ResourceForbiddenError,
    ResourceNotFoundError,
)
from magnetar.broker.policies.clusters import ClusterResources
from magnetar.broker.policies.watchers import Watchers
from magnetar.storage import MetadataStore
from magnetar.wire.topic_name import InvalidTopicNameError, check_entity_name

CLUSTER = "standalone"
"""The local cluster's name unless `clusterName` says otherwise."""
REPLICATION_CLUSTERS = "replication_clusters"
"""The field of Pulsar's Policies listing the clusters a namespace's topics are replicated to."""
#: What a first start creates, as Pulsar's standalone does.
DEFAULT_NAMESPACES = ("public/default", "pulsar/system")
_TENANTS = "/admin/tenants/"
_NAMESPACES = "/admin/namespaces/"


def default_tenant_info(local_cluster: str = CLUSTER) -> dict[str, Any]:
    return {"adminRoles": [], "allowedClusters": [local_cluster]}


class NamespaceResources:
    def __init__(self, store: MetadataStore, local_cluster: str = CLUSTER) -> None:
        self._store = store
        self.clusters = ClusterResources(store, local_cluster)
        self.version = 0
        """Bumped whenever a namespace or its policies change (TopicPolicies caches by it)."""
        self._watchers: Watchers[str] = Watchers()

    def watch(self, watcher: Callable[[str], None]) -> None:
        """Call `watcher(scope)` after a tenant's info (scope: the tenant) or a namespace's
        policies (scope: `tenant/namespace`) change: what revalidates open handles."""
        self._watchers.add(watcher)

    def _changed(self, scope: str) -> None:
        self._watchers.notify(scope)

    def bootstrap(self, namespaces_in_use: Iterable[str]) -> None:
        """Create the default namespaces, and adopt those stored topics already live in
        (a data dir from before namespaces were kept), so no topic is orphaned."""
        for namespace in [*DEFAULT_NAMESPACES, *namespaces_in_use]:
            tenant = namespace.split("/", 1)[0]
            if self.get_tenant(tenant) is None:
                self._store.put(_TENANTS + tenant, json.dumps(default_tenant_info(self.clusters.local)).encode())
            if not self.namespace_exists(namespace):
                self._store.put(_NAMESPACES + namespace, b"{}")

    # -- tenants
    def tenants(self) -> list[str]:
        return sorted(key.removeprefix(_TENANTS) for key in self._store.list(_TENANTS))

    def get_tenant(self, tenant: str) -> dict[str, Any] | None:
        raw = self._store.get(_TENANTS + tenant)
        return json.loads(raw) if raw is not None else None

    def tenant_info(self, tenant: str) -> dict[str, Any]:
        info = self.get_tenant(tenant)
        if info is None:
            raise ResourceNotFoundError("Tenant does not exist")
        return info

    def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        _check_name("tenant", tenant)
        if self.get_tenant(tenant) is not None:
            raise ResourceConflictError("Tenant already exists")
        self._store.put(_TENANTS + tenant, json.dumps(self._valid_tenant_info(info)).encode())

    def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        """A cluster one of the tenant's namespaces replicates to stays allowed (409 otherwise,
        as Pulsar answers): a tenant replicates only to clusters it allows."""
        before = set(self.tenant_info(tenant).get("allowedClusters", []))
        valid = self._valid_tenant_info(info)
        removed = before - set(valid["allowedClusters"])
        in_use = sorted({cluster for ns in self.namespaces(tenant) for cluster in
                         self.policies(ns).get(REPLICATION_CLUSTERS) or () if cluster in removed})
        if in_use:
            raise ResourceConflictError(f"Failed to update the tenant because its namespaces replicate to {in_use}: "
                                        "take them out of the namespaces' replication clusters first")
        self._store.put(_TENANTS + tenant, json.dumps(valid).encode())
        self._changed(tenant)

    def delete_tenant(self, tenant: str) -> None:
        self.tenant_info(tenant)
        if self.namespaces(tenant):
            raise ResourceConflictError("The tenant still has active namespaces")
        self._store.delete(_TENANTS + tenant)

    def _valid_tenant_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """TenantInfo as Pulsar takes it: the clusters it allows must exist, as Pulsar answers."""
        roles = info.get("adminRoles", [])
        clusters = info.get("allowedClusters", [self.clusters.local])
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise InvalidResourceError("adminRoles must be a list of role names")
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise InvalidResourceError("allowedClusters must be a list of cluster names")
        if not all(self.clusters.exists(cluster) for cluster in clusters):
            raise InvalidResourceError("Clusters do not exist")
        return {"adminRoles": roles, "allowedClusters": clusters or [self.clusters.local]}

    # -- namespaces
    def namespaces(self, tenant: str) -> list[str]:
        self.tenant_info(tenant)
        prefix = f"{_NAMESPACES}{tenant}/"
        return sorted(key.removeprefix(_NAMESPACES) for key in self._store.list(prefix))

    def namespace_exists(self, namespace: str) -> bool:
        return self._store.get(_NAMESPACES + namespace) is not None

    def policies(self, namespace: str) -> dict[str, Any]:
        raw = self._store.get(_NAMESPACES + namespace)
        if raw is None:
            raise ResourceNotFoundError("Namespace does not exist")
        return json.loads(raw)

    def create_namespace(self, namespace: str, policies: dict[str, Any] | None = None) -> None:
        tenant, _, local = namespace.partition("/")
        _check_name("namespace", local)
        self.tenant_info(tenant)
        if self.namespace_exists(namespace):
            raise ResourceConflictError("Namespace already exists")
        self._store.put(_NAMESPACES + namespace, json.dumps(policies or {}).encode())
        self.version += 1

    def delete_namespace(self, namespace: str) -> None:
        """The caller checks that no topic is left in it (only the broker knows its topics)."""
        self.policies(namespace)
        self._store.delete(_NAMESPACES + namespace)
        self.version += 1

    def set_policy(self, namespace: str, field: str, value: Any) -> None:
        """Set (or, with None, remove) one field of the namespace's Policies."""
        policies = self.policies(namespace)
        if value is None:
            policies.pop(field, None)
        else:
            policies[field] = value
        self._store.put(_NAMESPACES + namespace, json.dumps(policies).encode())
        self.version += 1
        self._changed(namespace)


    def all_namespaces(self) -> list[str]:
        return sorted(key.removeprefix(_NAMESPACES) for key in self._store.list(_NAMESPACES))

    # -- replication
    def replication_clusters(self, namespace: str) -> list[str]:
        """The clusters the namespace's topics are replicated to (Pulsar: the local one when unset)."""
        return self.policies(namespace).get(REPLICATION_CLUSTERS) or [self.clusters.local]

    def set_replication_clusters(self, namespace: str, clusters: list[str]) -> None:
        self.set_policy(namespace, REPLICATION_CLUSTERS, self.checked_replication_clusters(namespace, clusters))

    def checked_replication_clusters(self, namespace: str, clusters: list[str]) -> list[str]:
        """`clusters` for the namespace or one of its topics, sorted, after Pulsar's checks in
        its order and words: a list, not `global`, clusters that exist, clusters the tenant allows."""
        self.policies(namespace)
        if not clusters:
            raise InvalidResourceError("ClusterIds should not be null or empty")
        if "global" in clusters:
            raise InvalidResourceError("Cannot specify global in the list of replication clusters")
        tenant = namespace.split("/", 1)[0]
        allowed = self.tenant_info(tenant).get("allowedClusters", [])
        for cluster in dict.fromkeys(clusters):
            if not self.clusters.exists(cluster):
                raise ResourceForbiddenError(f"Invalid cluster id: {cluster}")
            if cluster not in allowed:
                raise ResourceForbiddenError(
                    f"Cluster [{cluster}] is not in the list of allowed clusters list for tenant [{tenant}]")
        return sorted(set(clusters))

    def replicating_to(self, cluster: str) -> list[str]:
        """The namespaces whose replication clusters name `cluster`."""
        return [ns for ns in self.all_namespaces()
                if cluster in (self.policies(ns).get(REPLICATION_CLUSTERS) or ())]


def _check_name(kind: str, name: str) -> None:
    try:
        check_entity_name(kind, name)
    except InvalidTopicNameError as exc:
        raise InvalidResourceError(str(exc)) from exc
