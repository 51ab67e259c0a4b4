"""`/admin/v2/namespaces/{tenant}/{namespace}/permissions[/{role}]`: Pulsar's namespace
permissions (grant-permission, revoke-permission, permissions)."""

from __future__ import annotations

from aiohttp import web

from magnetar.admin.responses import fail, json_body, no_content
from magnetar.broker.service import BrokerService

PERMISSIONS = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"


def _namespace(request: web.Request) -> str:
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


class PermissionsApi:
    def __init__(self, service: BrokerService) -> None:
        self.authorization = service.authorization

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(PERMISSIONS, self.get),
            web.post(PERMISSIONS + "/{role}", self.grant),
            web.delete(PERMISSIONS + "/{role}", self.revoke),
        ]

    async def get(self, request: web.Request) -> web.Response:
        return web.json_response(self.authorization.permissions(_namespace(request)))

    async def grant(self, request: web.Request) -> web.Response:
        actions = await json_body(request, None)
        if not isinstance(actions, list) or not all(isinstance(action, str) for action in actions):
            raise fail(400, 'the body must be a JSON list of actions, e.g. ["produce", "consume"]')
        self.authorization.grant(_namespace(request), request.match_info["role"], actions)
        return no_content()

    async def revoke(self, request: web.Request) -> web.Response:
        self.authorization.revoke(_namespace(request), request.match_info["role"])
        return no_content()
