"""`/admin/v2/tenants` and `/admin/v2/clusters`: Pulsar's tenants and clusters resources."""

from __future__ import annotations

from collections.abc import Callable

from magnetar import web
from magnetar.admin.responses import fail, json_body, no_content
from magnetar.broker.config.secrets import masked
from magnetar.broker.policies.resources import default_tenant_info
from magnetar.broker.policies.topic_policies import REPLICATION_CLUSTERS
from magnetar.broker.service.broker_service import BrokerService

TENANT = "/admin/v2/tenants/{tenant}"
CLUSTER = "/admin/v2/clusters/{cluster}"


class TenantsApi:
    def __init__(self, service: BrokerService, http_url: Callable[[], str]) -> None:
        self.service = service
        self.resources = service.resources
        self._http_url = http_url

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/v2/tenants", self.list_tenants),
            web.get(TENANT, self.get_tenant),
            web.put(TENANT, self.create_tenant),
            web.post(TENANT, self.update_tenant),
            web.delete(TENANT, self.delete_tenant),
            web.get("/admin/v2/clusters", self.list_clusters),
            web.get(CLUSTER, self.get_cluster),
            web.put(CLUSTER, self.create_cluster),
            web.post(CLUSTER, self.update_cluster),
            web.delete(CLUSTER, self.delete_cluster),
        ]

    async def list_tenants(self, _request: web.Request) -> web.Response:
        return web.json_response(self.resources.tenants())

    async def get_tenant(self, request: web.Request) -> web.Response:
        return web.json_response(self.resources.tenant_info(request.match_info["tenant"]))

    async def create_tenant(self, request: web.Request) -> web.Response:
        info = await json_body(request, default_tenant_info(self.resources.clusters.local))
        self.resources.create_tenant(request.match_info["tenant"], _as_object(info))
        return no_content()

    async def update_tenant(self, request: web.Request) -> web.Response:
        info = await json_body(request, default_tenant_info(self.resources.clusters.local))
        self.resources.update_tenant(request.match_info["tenant"], _as_object(info))
        return no_content()

    async def delete_tenant(self, request: web.Request) -> web.Response:
        self.resources.delete_tenant(request.match_info["tenant"])
        return no_content()

    async def list_clusters(self, _request: web.Request) -> web.Response:
        return web.json_response(self.resources.clusters.names())

    async def get_cluster(self, request: web.Request) -> web.Response:
        """A remote cluster's data as stored; the local one's as this broker serves it,
        under what an update stored. Credentials are masked (broker.config.secrets): they are
        how this broker authenticates to the cluster, not for its admins to read back."""
        clusters = self.resources.clusters
        cluster = request.match_info["cluster"]
        data = clusters.get(cluster)
        if cluster == clusters.local:
            listener = self.service.listeners.resolve(None)
            data = {"serviceUrl": self._http_url(), "brokerServiceUrl": listener.broker_service_url,
                    "brokerServiceUrlTls": listener.broker_service_url_tls, **data}
        return web.json_response(masked(data))

    async def create_cluster(self, request: web.Request) -> web.Response:
        self.resources.clusters.create(request.match_info["cluster"], _as_object(await json_body(request, {})))
        return no_content()

    async def update_cluster(self, request: web.Request) -> web.Response:
        self.resources.clusters.update(request.match_info["cluster"], _as_object(await json_body(request, {})))
        return no_content()

    async def delete_cluster(self, request: web.Request) -> web.Response:
        cluster = request.match_info["cluster"]
        topics = self.service.policies.topic_values(REPLICATION_CLUSTERS)
        in_use = bool(self.resources.replicating_to(cluster)) or any(cluster in clusters for clusters in topics)
        self.resources.clusters.delete(cluster, in_use)
        return no_content()


def _as_object(body: object) -> dict:
    if not isinstance(body, dict):
        raise fail(400, "the body must be a JSON object")
    return body
