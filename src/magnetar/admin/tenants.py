"""`/admin/v2/tenants` and `/admin/v2/clusters`: Pulsar's tenants and clusters resources."""

from __future__ import annotations

from collections.abc import Callable

from magnetar import web
from magnetar.admin.responses import fail, json_body, no_content
from magnetar.broker.policies.resources import CLUSTER, default_tenant_info
from magnetar.broker.service.broker_service import BrokerService

TENANT = "/admin/v2/tenants/{tenant}"


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
            web.get("/admin/v2/clusters/{cluster}", self.get_cluster),
        ]

    async def list_tenants(self, _request: web.Request) -> web.Response:
        return web.json_response(self.resources.tenants())

    async def get_tenant(self, request: web.Request) -> web.Response:
        return web.json_response(self.resources.tenant_info(request.match_info["tenant"]))

    async def create_tenant(self, request: web.Request) -> web.Response:
        info = await json_body(request, default_tenant_info())
        self.resources.create_tenant(request.match_info["tenant"], _as_object(info))
        return no_content()

    async def update_tenant(self, request: web.Request) -> web.Response:
        info = await json_body(request, default_tenant_info())
        self.resources.update_tenant(request.match_info["tenant"], _as_object(info))
        return no_content()

    async def delete_tenant(self, request: web.Request) -> web.Response:
        self.resources.delete_tenant(request.match_info["tenant"])
        return no_content()

    async def list_clusters(self, _request: web.Request) -> web.Response:
        return web.json_response([CLUSTER])

    async def get_cluster(self, request: web.Request) -> web.Response:
        if request.match_info["cluster"] != CLUSTER:
            raise fail(404, "Cluster does not exist")
        listener = self.service.listeners.resolve(None)
        return web.json_response({"serviceUrl": self._http_url(), "brokerServiceUrl": listener.broker_service_url,
                                  "brokerServiceUrlTls": listener.broker_service_url_tls})


def _as_object(body: object) -> dict:
    if not isinstance(body, dict):
        raise fail(400, "the body must be a JSON object")
    return body
