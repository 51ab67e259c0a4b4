"""`/admin/v2/namespaces/...`: Pulsar's namespaces resource and namespace policies."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from magnetar import web
from magnetar.admin.backlog_quotas import backlog_quota_routes, quota_map_value
from magnetar.admin.policy_table import PolicyRoute, policy_table
from magnetar.admin.responses import Validator, bool_param, fail, json_body, no_content, policy_routes
from magnetar.admin.retention import default_size_quota, retention_routes, retention_value
from magnetar.broker.auth.authorization import AUTH_POLICIES, InvalidPermissionError, valid_auth_policies
from magnetar.broker.errors import ResourceConflictError
from magnetar.broker.policies.backlog_quota import BACKLOG_QUOTA
from magnetar.broker.policies.retention import RETENTION
from magnetar.broker.service.broker_service import BrokerService
from magnetar.wire.proto import pulsar_api_pb2 as pb

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
Mode = pb.CommandGetTopicsOfNamespace
_UNSET = {"encryptionRequired": False}
"""What GET answers for a policy never set whose field in Pulsar's Policies is a primitive (not null)."""
_MODES = {"PERSISTENT": Mode.PERSISTENT, "NON_PERSISTENT": Mode.NON_PERSISTENT, "ALL": Mode.ALL}


def _auth_policies(name: str, value: Any) -> dict[str, Any]:
    try:
        return valid_auth_policies(value)
    except InvalidPermissionError as exc:
        raise fail(412, f"Invalid value for {name}: {exc.message}") from exc


def _namespace(request: web.Request) -> str:
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


class NamespacesApi:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.resources = service.resources

    @cached_property
    def _policies(self) -> list[tuple[str, PolicyRoute]]:
        """The policies of `{namespace}/{path}`, by path."""
        return [(row.namespace_path, row) for row in policy_table(self.service) if row.namespace_path is not None]

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/v2/namespaces/{tenant}", self.list_namespaces),
            web.get(NAMESPACE, self.get_policies),
            web.put(NAMESPACE, self.create_namespace),
            web.delete(NAMESPACE, self.delete_namespace),
            web.get(NAMESPACE + "/topics", self.list_topics),
            web.get(NAMESPACE + "/replication", self.get_replication_clusters),
            web.post(NAMESPACE + "/replication", self.set_replication_clusters),
            *(route for path, row in self._policies for route in self._policy_routes(path, row)),
            *retention_routes(
                self.service, NAMESPACE,
                lambda request: self.resources.policies(_namespace(request)).get(RETENTION.namespace_field),
                lambda request, value: self.service.policies.set_namespace_value(_namespace(request), RETENTION, value),
                lambda request: default_size_quota(
                    self.service, self.resources.policies(_namespace(request)).get(BACKLOG_QUOTA.namespace_field))),
            *backlog_quota_routes(
                NAMESPACE,
                lambda request: self.resources.policies(_namespace(request)).get(BACKLOG_QUOTA.namespace_field),
                lambda request, value: self.service.policies.set_namespace_value(_namespace(request), BACKLOG_QUOTA,
                                                                                 value)),
        ]

    def _policy_routes(self, path: str, row: PolicyRoute) -> list[web.RouteDef]:
        policies, policy = self.service.policies, row.policy
        unset = _UNSET.get(path)
        return policy_routes(
            f"{NAMESPACE}/{path}", path, row.valid,
            lambda request: self.resources.policies(_namespace(request)).get(policy.namespace_field, unset),
            lambda request, value: policies.set_namespace_value(_namespace(request), policy, value))

    async def get_replication_clusters(self, request: web.Request) -> web.Response:
        return web.json_response(self.resources.replication_clusters(_namespace(request)))

    async def set_replication_clusters(self, request: web.Request) -> web.Response:
        """pulsar-admin namespaces set-clusters: a JSON list of cluster names."""
        clusters = await json_body(request, None)
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise fail(400, "the body must be a JSON list of cluster names")
        self.resources.set_replication_clusters(_namespace(request), clusters)
        return no_content()

    async def list_namespaces(self, request: web.Request) -> web.Response:
        return web.json_response(self.resources.namespaces(request.match_info["tenant"]))

    async def get_policies(self, request: web.Request) -> web.Response:
        return web.json_response(self.resources.policies(_namespace(request)))

    async def create_namespace(self, request: web.Request) -> web.Response:
        policies = await json_body(request, {})
        if not isinstance(policies, dict):
            raise fail(400, "the body must be a JSON object of namespace policies")
        self.resources.create_namespace(_namespace(request), self._checked(policies))
        return no_content()

    def _checked(self, policies: dict[str, Any]) -> dict[str, Any]:
        """The policies a creation carries, each field magnetar reads checked as its own route
        checks it (412 naming it); fields it does not read are kept as given, as Pulsar's."""
        checks: dict[str, tuple[str, Validator]] = {
            row.policy.namespace_field: (path, row.valid) for path, row in self._policies}
        checks.update({RETENTION.namespace_field: ("retention", retention_value),
                       BACKLOG_QUOTA.namespace_field: ("backlogQuotaMap", quota_map_value),
                       AUTH_POLICIES: ("auth_policies", _auth_policies)})
        checked = dict(policies)
        for field, (name, valid) in checks.items():
            if checked.get(field) is not None:
                checked[field] = valid(name, checked[field])
        return checked

    async def delete_namespace(self, request: web.Request) -> web.Response:
        namespace = _namespace(request)
        if bool_param(request, "force"):
            raise fail(405, "Broker doesn't allow forced deletion of namespaces")  # forceDeleteNamespaceAllowed
        self.resources.policies(namespace)
        if self.service.topics_of_namespace(namespace, mode=Mode.ALL) or self.service.has_partitioned_topics(namespace):
            raise ResourceConflictError("Cannot delete non empty namespace")
        self.resources.delete_namespace(namespace)
        return no_content()

    async def list_topics(self, request: web.Request) -> web.Response:
        namespace = _namespace(request)
        self.resources.policies(namespace)
        mode = _MODES.get(request.query.get("mode", "PERSISTENT").upper())
        if mode is None:
            raise fail(400, "mode must be PERSISTENT, NON_PERSISTENT or ALL")
        return web.json_response(self.service.topics_of_namespace(namespace, mode=mode))
