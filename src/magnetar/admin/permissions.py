"""Pulsar's permissions of namespaces and topics: `/admin/v2/namespaces/{tenant}/{namespace}/
permissions[/{role}]` (grant-permission, revoke-permission, permissions) and
`/admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions[/{role}]` (the topics' own,
kept in the namespace's policies under `destination_auth` as Pulsar keeps them)."""

from __future__ import annotations

from collections.abc import Callable

from magnetar import web
from magnetar.admin.operations import ANY_TOPIC, NAMESPACE
from magnetar.admin.responses import fail, json_body, no_content
from magnetar.broker.service.broker_service import BrokerService
from magnetar.wire.topic_name import TopicName

Target = Callable[[web.Request], TopicName | None]


def _namespace(request: web.Request) -> str:
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


class PermissionsApi:
    def __init__(self, service: BrokerService, topic_name: Callable[[web.Request], TopicName]) -> None:
        self.authorization = service.authorization
        self._topic_name = topic_name

    def routes(self) -> list[web.RouteDef]:
        routes = []
        for base, target in ((NAMESPACE, lambda _request: None), (ANY_TOPIC, self._topic_name)):
            routes += [web.get(f"{base}/permissions", self._get(target)),
                       web.post(f"{base}/permissions/{{role}}", self._grant(target)),
                       web.delete(f"{base}/permissions/{{role}}", self._revoke(target))]
        return routes

    def _get(self, target: Target) -> web.Handler:
        async def get(request: web.Request) -> web.Response:
            return web.json_response(self.authorization.permissions(_namespace(request), target(request)))

        return get

    def _grant(self, target: Target) -> web.Handler:
        async def grant(request: web.Request) -> web.Response:
            actions = await json_body(request, None)
            if not isinstance(actions, list) or not all(isinstance(action, str) for action in actions):
                raise fail(400, 'the body must be a JSON list of actions, e.g. ["produce", "consume"]')
            self.authorization.grant(_namespace(request), request.match_info["role"], actions, target(request))
            return no_content()

        return grant

    def _revoke(self, target: Target) -> web.Handler:
        async def revoke(request: web.Request) -> web.Response:
            self.authorization.revoke(_namespace(request), request.match_info["role"], target(request))
            return no_content()

        return revoke
