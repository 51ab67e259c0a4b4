"""What a role may do (Pulsar's PulsarAuthorizationProvider): super users
(superUserRoles) everything, a tenant's adminRoles everything in that tenant, and
other roles what their permissions grant (produce, consume, functions, sources, sinks,
packages), for each operation as broker.auth.operations says.

Permissions live in the namespace's Policies as Pulsar keeps them,
`auth_policies.namespace_auth = {role: [actions]}` for the namespace and
`auth_policies.destination_auth = {topic: {role: [actions]}}` for single topics (a
partition also takes its partitioned topic's), so a namespace's JSON reads as a Pulsar
user expects. A refusal names the role, the operation and what it needs, and is raised
before anything is created on the role's behalf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.auth.operations import GRANTS, Need, Operation
from magnetar.broker.errors import BrokerServiceError, ResourceNotFoundError
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.resources import NamespaceResources
    from magnetar.wire.topic_name import TopicName

#: Pulsar's AuthAction names.
ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
AUTH_POLICIES = "auth_policies"
#: Needs met by holding no grant at all (authorization looks at nothing).
_UNCONDITIONAL = frozenset({Need.PUBLIC, Need.OPEN, Need.AUTHENTICATED, Need.HOLDER})


class AuthorizationError(BrokerServiceError):
    """A role may not do what it asked; the admin API answers 403."""

    http_status = 403

    def __init__(self, message: str) -> None:
        super().__init__(pb.AuthorizationError, message)


class InvalidPermissionError(BrokerServiceError):
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(pb.MetadataError, message)


class PermissionNotSetError(BrokerServiceError):
    """Revoking on a topic what was granted on its namespace (Pulsar: 412)."""

    http_status = 412

    def __init__(self, message: str) -> None:
        super().__init__(pb.MetadataError, message)


@dataclass(frozen=True, slots=True)
class Resource:
    """What an operation acts on: a topic, a namespace, a tenant, or the broker itself."""

    tenant: str | None = None
    namespace: str | None = None
    topic: TopicName | None = None

    @classmethod
    def of_topic(cls, topic: TopicName) -> Resource:
        return cls(topic.tenant, topic.namespace_name, topic)

    @classmethod
    def of_namespace(cls, namespace: str) -> Resource:
        return cls(namespace.split("/", 1)[0], namespace)

    def __str__(self) -> str:
        if self.topic is not None:
            return f"on topic {self.topic}"
        if self.namespace is not None:
            return f"in namespace {self.namespace}"
        return f"in tenant {self.tenant}" if self.tenant is not None else "on this broker"


def valid_auth_policies(value: Any) -> dict[str, Any]:
    """Pulsar's AuthPolicies JSON as a namespace's creation may carry it, checked: grants are
    lists of known actions by role (the namespace's, and by topic). InvalidPermissionError
    otherwise, so no request stores what every later authorization would trip over."""
    if not isinstance(value, dict):
        raise InvalidPermissionError("auth_policies must be a JSON object")
    namespace_auth = value.get("namespace_auth", {})
    by_topic = value.get("destination_auth", {})
    subscriptions = value.get("subscription_auth_roles", {})
    if not isinstance(by_topic, dict) or not isinstance(subscriptions, dict) or not all(
            _strings(roles) for roles in subscriptions.values()):
        raise InvalidPermissionError("auth_policies: destination_auth and subscription_auth_roles must be JSON objects "
                                     "of grants and of role lists")
    for grants in (namespace_auth, *by_topic.values()):
        _check_grants(grants)
    return {"namespace_auth": namespace_auth, "destination_auth": by_topic, "subscription_auth_roles": subscriptions}


def _check_grants(grants: Any) -> None:
    if not isinstance(grants, dict) or not all(
            _strings(actions) and set(actions) <= set(ACTIONS) for actions in grants.values()):
        raise InvalidPermissionError(f"auth_policies: grants are {{role: [actions]}}, the actions "
                                     f"{', '.join(ACTIONS)}")


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


class AuthorizationService:
    def __init__(self, config: ServiceConfiguration, resources: NamespaceResources) -> None:
        self.enabled = config.authorizationEnabled
        self._super_users = frozenset(config.superUserRoles)
        self._resources = resources

    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self._super_users

    def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        if role is None:
            return False
        if self.is_super_user(role):
            return True
        info = self._resources.get_tenant(tenant)
        return info is not None and role in info.get("adminRoles", [])

    def check(self, operation: Operation, role: str | None, resource: Resource) -> None:
        """AuthorizationError unless `role` may perform `operation` on `resource`.

        A topic in a tenant that does not exist is not found (TopicNotFound, 404) for every
        role but a super user, whose operation then finds what is missing itself: Pulsar
        checks the tenant first, and the official client's suite expects TopicNotFound of
        `create_producer('tenant/ns/t')`. A namespace's existence is never told this way:
        in a tenant that exists, a role without rights is refused alike either way.
        """
        if not self.enabled or operation.need in _UNCONDITIONAL or self.is_super_user(role):
            return
        if resource.topic is not None and self._resources.get_tenant(resource.topic.tenant) is None:
            raise ResourceNotFoundError(f"tenant {resource.topic.tenant} does not exist (topic {resource.topic})")
        if not self.permits(operation.need, role, resource):
            raise AuthorizationError(f"role {role!r} is not authorized to {operation.verb} {resource} "
                                     f"(it needs {operation.need.value})")

    def permits(self, need: Need, role: str | None, resource: Resource) -> bool:
        """Whether `role` meets `need` on `resource` (authorization on or not)."""
        if need in _UNCONDITIONAL or self.is_super_user(role):
            return True
        if need is Need.SUPER_USER:
            return False
        if resource.tenant is not None and self.is_tenant_admin(resource.tenant, role):
            return True
        return need in GRANTS and bool(GRANTS[need] & self.granted(role, resource))

    def granted(self, role: str | None, resource: Resource) -> frozenset[str]:
        """The actions `role` holds on `resource`: its namespace's grants, and for a topic the
        topic's own and its partitioned topic's (none for an unknown namespace)."""
        if role is None or resource.namespace is None:
            return frozenset()
        try:
            auth = self._resources.policies(resource.namespace).get(AUTH_POLICIES, {})
        except ResourceNotFoundError:
            return frozenset()
        actions = set(auth.get("namespace_auth", {}).get(role, ()))
        if resource.topic is not None:
            by_topic = auth.get("destination_auth", {})
            for name in {str(resource.topic), str(resource.topic.partitioned_topic_name)}:
                actions.update(by_topic.get(name, {}).get(role, ()))
        return frozenset(actions)

    # -- permissions (the admin API's /permissions of namespaces and topics)
    def permissions(self, namespace: str, topic: TopicName | None = None) -> dict[str, list[str]]:
        """The namespace's grants; for a topic, as Pulsar's getPermissionsOnTopic answers,
        the namespace's merged with the topic's own."""
        auth = self._auth(namespace)
        merged = {role: sorted(actions) for role, actions in auth.get("namespace_auth", {}).items()}
        if topic is not None:
            for role, actions in auth.get("destination_auth", {}).get(str(topic), {}).items():
                merged[role] = sorted({*merged.get(role, ()), *actions})
        return merged

    def grant(self, namespace: str, role: str, actions: list[str], topic: TopicName | None = None) -> None:
        unknown = sorted(set(actions) - set(ACTIONS))
        if unknown:
            raise InvalidPermissionError(f"unknown action {', '.join(unknown)} (actions are {', '.join(ACTIONS)})")
        self._set_permissions(namespace, role, sorted(set(actions)), topic)

    def revoke(self, namespace: str, role: str, topic: TopicName | None = None) -> None:
        if topic is not None and role not in self._auth(namespace).get("destination_auth", {}).get(str(topic), {}):
            raise PermissionNotSetError("Permissions are not set at the topic level")
        self._set_permissions(namespace, role, None, topic)

    def _auth(self, namespace: str) -> dict[str, Any]:
        return self._resources.policies(namespace).get(AUTH_POLICIES, {})

    def _set_permissions(self, namespace: str, role: str, actions: list[str] | None, topic: TopicName | None) -> None:
        auth = dict(self._auth(namespace))
        by_topic = dict(auth.get("destination_auth", {}))
        table = dict(auth.get("namespace_auth", {}) if topic is None else by_topic.get(str(topic), {}))
        if actions is None:
            table.pop(role, None)
        else:
            table[role] = actions
        if topic is None:
            auth["namespace_auth"] = table
        elif table:
            by_topic[str(topic)] = table
        else:
            by_topic.pop(str(topic), None)
        auth["destination_auth"] = by_topic
        auth.setdefault("namespace_auth", {})
        auth.setdefault("subscription_auth_roles", {})
        self._resources.set_policy(namespace, AUTH_POLICIES, auth)
