"""Authentication and authorization of admin requests, as a middleware.

Credentials are read as Pulsar's HTTP authentication reads them (`Authorization:
Bearer`, `Authorization: Basic`, a TLS client certificate, else the anonymous role)
and checked by the same providers as the binary protocol. Each route is then checked
for the operation it performs (admin.operations) on the resource its path names, as
Pulsar's default authorization provider checks it. /metrics is open unless
authenticateMetricsEndpoint=true, which asks for credentials (any role), as in Pulsar.
The web console's files are public: a browser cannot send a token before the page that
asks for it has loaded, and every figure the page then shows comes from an admin request
made with the token it was given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from magnetar import web
from magnetar.admin.operations import Route, route_of
from magnetar.admin.responses import fail
from magnetar.broker.auth.authentication import AuthenticationError, Principal
from magnetar.broker.auth.authorization import Resource
from magnetar.broker.auth.operations import Need, Operation
from magnetar.broker.service.broker_service import BrokerService
from magnetar.web import PRINCIPAL

log = logging.getLogger(__name__)


def security_middleware(service: BrokerService,
                        rules: Mapping[Route, Operation]) -> web.Middleware:
    """Checks each request against `rules` as they are when it comes (routes may be added
    after the app is built)."""

    async def secure(request: web.Request, handler: web.Handler) -> web.Response:
        authentication = service.authentication
        route = route_of(request)
        operation = rules.get(route) if route is not None else None
        need = operation.need if operation is not None else None
        if not authentication.enabled or need is Need.PUBLIC or (
                need is Need.OPEN and not service.config.authenticateMetricsEndpoint):
            return await handler(request)
        request[PRINCIPAL] = principal = await _authenticate(service, request)
        if route is not None:  # an unknown path answers 404 as usual
            if operation is None:  # a route without a rule is nobody's
                log.error("admin route %s %s has no authorization rule; refused", *route)
                raise fail(403, f"{request.method} {request.path} has no authorization rule")
            service.authorization.check(operation, principal.role, resource_of(service, request))
        return await handler(request)

    return secure


async def _authenticate(service: BrokerService, request: web.Request) -> Principal:
    authentication = service.authentication
    transport = request.transport
    certificate = transport.get_extra_info("peercert") if transport is not None else None
    try:
        credentials = authentication.http_credentials(request.headers.get("Authorization"), certificate)
        return await authentication.authenticate_async(credentials)
    except AuthenticationError as exc:
        raise fail(401, f"Unable to authenticate: {exc}") from None


def resource_of(service: BrokerService, request: web.Request) -> Resource:
    """What the route's path names: a topic, a namespace, a tenant, or the broker."""
    info = request.match_info
    if "topic" in info:
        return Resource.of_topic(service.parse_topic(
            f"{info.get('domain', 'persistent')}://{info['tenant']}/{info['namespace']}/{info['topic']}"))
    if "namespace" in info:
        return Resource.of_namespace(f"{info['tenant']}/{info['namespace']}")
    return Resource(info.get("tenant"))

