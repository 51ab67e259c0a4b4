"""`/admin/v2/namespaces/...`: Pulsar's namespaces resource and namespace policies."""

from __future__ import annotations

from aiohttp import web

from magnetar.admin.backlog_quotas import backlog_quota_routes
from magnetar.admin.responses import (
    Validator,
    bool_param,
    boolean,
    delayed_delivery_policies,
    entry_filter_policy,
    fail,
    json_body,
    no_content,
    non_negative_int,
    non_negative_number,
    policy_routes,
    schema_compatibility_strategy,
)
from magnetar.admin.retention import default_size_quota, retention_routes
from magnetar.broker.backlog_quota import BACKLOG_QUOTA
from magnetar.broker.compaction import COMPACTION_THRESHOLD
from magnetar.broker.deduplication import DEDUPLICATION
from magnetar.broker.entry_filters.policy import ENTRY_FILTERS
from magnetar.broker.errors import ResourceConflictError
from magnetar.broker.policies import MESSAGE_TTL, Policy
from magnetar.broker.retention import RETENTION
from magnetar.broker.service import BrokerService
from magnetar.broker.topic_limits import (
    DELAYED_DELIVERY,
    MAX_CONSUMERS,
    MAX_CONSUMERS_PER_SUBSCRIPTION,
    MAX_PRODUCERS,
    MAX_UNACKED_PER_CONSUMER,
    SCHEMA_COMPATIBILITY,
    SUBSCRIPTION_EXPIRATION,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
Mode = pb.CommandGetTopicsOfNamespace
_MODES = {"PERSISTENT": Mode.PERSISTENT, "NON_PERSISTENT": Mode.NON_PERSISTENT, "ALL": Mode.ALL}


def _namespace(request: web.Request) -> str:
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


class NamespacesApi:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.resources = service.resources

    def routes(self) -> list[web.RouteDef]:
        filters = entry_filter_policy(self.service.entry_filter_provider)
        return [
            web.get("/admin/v2/namespaces/{tenant}", self.list_namespaces),
            web.get(NAMESPACE, self.get_policies),
            web.put(NAMESPACE, self.create_namespace),
            web.delete(NAMESPACE, self.delete_namespace),
            web.get(NAMESPACE + "/topics", self.list_topics),
            *self._policy_routes("messageTTL", MESSAGE_TTL, non_negative_int),
            *self._policy_routes("deduplication", DEDUPLICATION, boolean),
            *self._policy_routes("entryFilters", ENTRY_FILTERS, filters),
            *self._policy_routes("maxProducersPerTopic", MAX_PRODUCERS, non_negative_int),
            *self._policy_routes("maxConsumersPerTopic", MAX_CONSUMERS, non_negative_int),
            *self._policy_routes("maxConsumersPerSubscription", MAX_CONSUMERS_PER_SUBSCRIPTION, non_negative_int),
            *self._policy_routes("maxUnackedMessagesPerConsumer", MAX_UNACKED_PER_CONSUMER, non_negative_int),
            *self._policy_routes("subscriptionExpirationTime", SUBSCRIPTION_EXPIRATION, non_negative_number),
            *self._policy_routes("delayedDelivery", DELAYED_DELIVERY, delayed_delivery_policies),
            *self._policy_routes("schemaCompatibilityStrategy", SCHEMA_COMPATIBILITY, schema_compatibility_strategy),
            *retention_routes(
                self.service, NAMESPACE,
                lambda request: self.resources.policies(_namespace(request)).get(RETENTION.namespace_field),
                lambda request, value: self.service.policies.set_namespace_value(_namespace(request), RETENTION, value),
                lambda request: default_size_quota(
                    self.service, self.resources.policies(_namespace(request)).get(BACKLOG_QUOTA.namespace_field))),
            *self._policy_routes("compactionThreshold", COMPACTION_THRESHOLD, non_negative_int),
            *backlog_quota_routes(
                NAMESPACE,
                lambda request: self.resources.policies(_namespace(request)).get(BACKLOG_QUOTA.namespace_field),
                lambda request, value: self.service.policies.set_namespace_value(_namespace(request), BACKLOG_QUOTA,
                                                                                 value)),
        ]

    def _policy_routes(self, path: str, policy: Policy, valid: Validator) -> list[web.RouteDef]:
        policies = self.service.policies
        return policy_routes(
            f"{NAMESPACE}/{path}", path, valid,
            lambda request: self.resources.policies(_namespace(request)).get(policy.namespace_field),
            lambda request, value: policies.set_namespace_value(_namespace(request), policy, value))

    async def list_namespaces(self, request: web.Request) -> web.Response:
        return web.json_response(self.resources.namespaces(request.match_info["tenant"]))

    async def get_policies(self, request: web.Request) -> web.Response:
        return web.json_response(self.resources.policies(_namespace(request)))

    async def create_namespace(self, request: web.Request) -> web.Response:
        policies = await json_body(request, {})
        if not isinstance(policies, dict):
            raise fail(400, "the body must be a JSON object of namespace policies")
        self.resources.create_namespace(_namespace(request), policies)
        return no_content()

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
