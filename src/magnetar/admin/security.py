"""Authentication and authorization of admin requests, as a middleware.

Credentials are read as Pulsar's HTTP authentication reads them (`Authorization:
Bearer`, `Authorization: Basic`, a TLS client certificate, else the anonymous role)
and checked by the same providers as the binary protocol. Each route is then checked
by the resource it names, in Pulsar's terms: a topic's reads need lookup permission
(produce or consume) and its subscriptions consume permission, everything else in a
tenant needs a tenant admin, and what lies outside any tenant (tenants, clusters,
brokers) a super user. /metrics stays open, as with Pulsar's default
authenticateMetricsEndpoint=false.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.typedefs import Handler

from magnetar.admin.responses import fail
from magnetar.broker.auth.authentication import AuthenticationError, Principal
from magnetar.broker.auth.authorization import LOOKUP
from magnetar.broker.service import BrokerService

PRINCIPAL = web.RequestKey("principal", Principal)
_OPEN_PATHS = frozenset({"/metrics"})
_TENANT_SCOPED = ("/admin/v2/namespaces/", "/admin/v2/persistent/", "/admin/v2/non-persistent/")


def security_middleware(service: BrokerService) -> web.middleware:  # type: ignore[valid-type]
    @web.middleware
    async def secure(request: web.Request, handler: Handler) -> web.StreamResponse:
        authentication = service.authentication
        if not authentication.enabled or request.path in _OPEN_PATHS:
            return await handler(request)
        transport = request.transport
        certificate = transport.get_extra_info("peercert") if transport is not None else None
        try:
            credentials = authentication.http_credentials(request.headers.get("Authorization"), certificate)
            if authentication.is_slow(credentials.method):  # password hashing: off the event loop
                principal = await asyncio.get_running_loop().run_in_executor(None, authentication.authenticate,
                                                                             credentials)
            else:
                principal = authentication.authenticate(credentials)
        except AuthenticationError as exc:
            raise fail(401, f"Unable to authenticate: {exc}") from None
        request[PRINCIPAL] = principal
        if request.match_info.http_exception is None:  # an unknown path answers 404 as usual
            authorize(service, request, principal.role)
        return await handler(request)

    return secure


def authorize(service: BrokerService, request: web.Request, role: str) -> None:
    """Raise AuthorizationError (403) unless `role` may make this request."""
    authorization = service.authorization
    info = request.match_info
    operation = f"{request.method} {request.path}"
    if "topic" in info and "namespace" in info:
        topic = service.parse_topic(f"{info.get('domain', 'persistent')}://{info['tenant']}/{info['namespace']}/"
                                    f"{info['topic']}")
        if "subscription" in info:
            authorization.check_topic(topic, role, "consume")
        elif request.method == "GET":
            authorization.check_topic(topic, role, LOOKUP)
        else:
            authorization.check_tenant_admin(topic.tenant, role, operation)
    elif "tenant" in info and (request.path.startswith(_TENANT_SCOPED) or request.method == "GET"):
        # a namespace, its topics, or reading a tenant's own info
        authorization.check_tenant_admin(info["tenant"], role, operation)
    else:
        authorization.check_super_user(role, operation)
