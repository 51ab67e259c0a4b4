"""Clusters, kept in the metadata store (Pulsar's ClusterResources).

A cluster is a name and how to reach it: its admin URLs, its brokers' binary-protocol URLs,
and the TLS and authentication settings a broker uses as a client of it. The local cluster
(`clusterName`) always exists; it is stored only once its data is updated. Other clusters
are what namespaces replicate to (docs/scaling.md). The data is kept under the field names of
Pulsar's ClusterData, so `GET /admin/v2/clusters/{cluster}` reads as Pulsar's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from magnetar.broker.config.secrets import MASK
from magnetar.broker.errors import InvalidResourceError, ResourceConflictError, ResourceNotFoundError
from magnetar.broker.policies.watchers import Watchers
from magnetar.spelling import did_you_mean
from magnetar.storage import MetadataStore
from magnetar.wire.topic_name import InvalidTopicNameError, check_entity_name

_CLUSTERS = "/admin/clusters/"
#: The URL fields of ClusterData and the schemes each takes.
URL_FIELDS = {
    "serviceUrl": ("http://",),
    "serviceUrlTls": ("https://",),
    "brokerServiceUrl": ("pulsar://",),
    "brokerServiceUrlTls": ("pulsar+ssl://",),
    "proxyServiceUrl": ("pulsar://", "pulsar+ssl://"),
}
_TEXT_FIELDS = (
    "authenticationPlugin", "authenticationParameters", "proxyProtocol", "brokerClientTlsTrustStoreType",
    "brokerClientTlsTrustStore", "brokerClientTlsTrustStorePassword", "brokerClientTlsKeyStoreType",
    "brokerClientTlsKeyStore", "brokerClientTlsKeyStorePassword", "brokerClientTrustCertsFilePath",
    "brokerClientKeyFilePath", "brokerClientCertificateFilePath", "listenerName", "brokerClientSslFactoryPlugin",
    "brokerClientSslFactoryPluginParams",
)
_FLAG_FIELDS = ("brokerClientTlsEnabled", "tlsAllowInsecureConnection", "brokerClientTlsEnabledWithKeyStore")
FIELDS = (*URL_FIELDS, *_TEXT_FIELDS, *_FLAG_FIELDS, "peerClusterNames")


class ClusterResources:
    def __init__(self, store: MetadataStore, local: str) -> None:
        self._store = store
        self.local = local
        """This broker's cluster (`clusterName`)."""
        self._watchers: Watchers[str] = Watchers()

    def watch(self, watcher: Callable[[str], None]) -> None:
        """Call `watcher(cluster)` after a cluster's data is created or updated: what the
        replicators waiting to reach it try again with at once."""
        self._watchers.add(watcher)

    def names(self) -> list[str]:
        stored = {key.removeprefix(_CLUSTERS) for key in self._store.list(_CLUSTERS)}
        return sorted(stored | {self.local})

    def exists(self, cluster: str) -> bool:
        return cluster == self.local or self._store.get(_CLUSTERS + cluster) is not None

    def stored(self, cluster: str) -> dict[str, Any] | None:
        """The data stored for `cluster` (None for the local cluster never updated, or an unknown one)."""
        raw = self._store.get(_CLUSTERS + cluster)
        return json.loads(raw) if raw is not None else None

    def get(self, cluster: str) -> dict[str, Any]:
        data = self.stored(cluster)
        if data is None:
            if cluster != self.local:
                raise ResourceNotFoundError("Cluster does not exist")
            data = {}
        return data

    def create(self, cluster: str, data: dict[str, Any]) -> None:
        try:
            check_entity_name("cluster", cluster)
        except InvalidTopicNameError as exc:
            raise InvalidResourceError(f"Cluster name is not valid: {exc}") from exc
        if self.exists(cluster):
            raise ResourceConflictError("Cluster already exists")
        self._store.put(_CLUSTERS + cluster, json.dumps(cluster_data(data)).encode())
        self._watchers.notify(cluster)

    def update(self, cluster: str, data: dict[str, Any]) -> None:
        """A secret sent back as the admin API showed it (masked) keeps its stored value, so
        data read, changed and written back does not turn a password into the mask."""
        if not self.exists(cluster):
            raise ResourceNotFoundError("Cluster does not exist")
        stored = self.stored(cluster) or {}
        data = {name: stored[name] if value == MASK and name in stored else value for name, value in data.items()}
        self._store.put(_CLUSTERS + cluster, json.dumps(cluster_data(data)).encode())
        self._watchers.notify(cluster)

    def delete(self, cluster: str, in_use: bool) -> None:
        """`in_use`: a namespace replicates to it (the caller knows the namespaces)."""
        if not self.exists(cluster):
            raise ResourceNotFoundError("Cluster does not exist")
        if cluster == self.local or in_use:
            raise InvalidResourceError("Cluster not empty")
        self._store.delete(_CLUSTERS + cluster)


def cluster_data(data: dict[str, Any]) -> dict[str, Any]:
    """ClusterData as Pulsar takes it: known fields only (null ones left out), URLs in their schemes."""
    kept: dict[str, Any] = {}
    for name, value in data.items():
        if name not in FIELDS:
            hint = did_you_mean(name, FIELDS)
            raise InvalidResourceError(f"unknown ClusterData field {name!r}" + (f": {hint}" if hint else ""))
        if value is None:
            continue
        if name in _FLAG_FIELDS:
            if not isinstance(value, bool):
                raise InvalidResourceError(f"{name} must be true or false")
        elif name == "peerClusterNames":
            if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
                raise InvalidResourceError("peerClusterNames must be a list of cluster names")
        elif not isinstance(value, str):
            raise InvalidResourceError(f"{name} must be a string")
        elif name in URL_FIELDS and value and not value.startswith(URL_FIELDS[name]):
            raise InvalidResourceError(f"{name} must start with {' or '.join(URL_FIELDS[name])}: {value!r}")
        kept[name] = value
    return kept
