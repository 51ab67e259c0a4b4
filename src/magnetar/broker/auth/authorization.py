"""What a role may do (Pulsar's PulsarAuthorizationProvider): super users
(superUserRoles) everything, a tenant's adminRoles everything in that tenant, and
other roles what their namespace permissions grant: produce, consume (lookup needs
either), functions, sources, sinks, packages.

Permissions live in the namespace's Policies as Pulsar keeps them,
`auth_policies.namespace_auth = {role: [actions]}`, so a namespace's JSON reads as a
Pulsar user expects. A refusal names the role and the action, and is raised before
anything is created on the role's behalf.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerServiceError, ResourceNotFoundError
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.resources import NamespaceResources
    from magnetar.wire.topic_name import TopicName

#: Pulsar's AuthAction names.
ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")
AUTH_POLICIES = "auth_policies"
LOOKUP = "lookup"
"""Not an action one grants: a role may look a topic up if it may produce or consume."""


class AuthorizationError(BrokerServiceError):
    """A role may not do what it asked; the admin API answers 403."""

    http_status = 403

    def __init__(self, message: str) -> None:
        super().__init__(pb.AuthorizationError, message)


class InvalidPermissionError(BrokerServiceError):
    http_status = 400

    def __init__(self, message: str) -> None:
        super().__init__(pb.MetadataError, message)


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

    def granted(self, namespace: str, role: str | None) -> frozenset[str]:
        """The actions `role` holds on `namespace` (none for an unknown namespace)."""
        if role is None:
            return frozenset()
        try:
            return frozenset(self.permissions(namespace).get(role, ()))
        except ResourceNotFoundError:
            return frozenset()

    def allows(self, namespace: str, role: str | None, action: str) -> bool:
        """Whether `role` may `action` on the topics of `namespace` (`tenant/ns`)."""
        if not self.enabled or self.is_tenant_admin(namespace.split("/", 1)[0], role):
            return True
        return self._grants_allow(namespace, role, action)

    def _grants_allow(self, namespace: str, role: str | None, action: str) -> bool:
        granted = self.granted(namespace, role)
        return bool(granted & {"produce", "consume"}) if action == LOOKUP else action in granted

    def check_topic(self, topic: TopicName, role: str | None, action: str) -> None:
        """Raise unless `role` may `action` on `topic`; a tenant that does not exist is not found.

        Pulsar's order: super users pass (the operation then finds what is missing);
        everyone else is first checked as an admin of the topic's tenant, and a tenant
        that does not exist answers TopicNotFound (404 on the admin API) to any role,
        which is what the official client's suite expects of `create_producer` on
        `tenant/ns/t`. A namespace's existence is never told this way: in an existing
        tenant a role without rights is refused alike whether the namespace exists.
        """
        if not self.enabled or self.is_super_user(role):
            return
        info = self._resources.get_tenant(topic.tenant)
        if info is None:
            raise ResourceNotFoundError(f"tenant {topic.tenant} does not exist (topic {topic})")
        if role not in info.get("adminRoles", []) and not self._grants_allow(topic.namespace_name, role, action):
            raise AuthorizationError(f"role {role!r} is not authorized to {action} on topic {topic}")

    def check_namespace(self, namespace: str, role: str | None, action: str) -> None:
        if not self.allows(namespace, role, action):
            raise AuthorizationError(f"role {role!r} is not authorized to {action} in namespace {namespace}")

    def check_tenant_admin(self, tenant: str, role: str | None, operation: str) -> None:
        if self.enabled and not self.is_tenant_admin(tenant, role):
            raise AuthorizationError(f"role {role!r} is not authorized to {operation}: it needs to be a super user "
                                     f"or an admin of tenant {tenant}")

    def check_super_user(self, role: str | None, operation: str) -> None:
        if self.enabled and not self.is_super_user(role):
            raise AuthorizationError(f"role {role!r} is not authorized to {operation}: it needs to be a super user")

    # -- namespace permissions (the admin API's /permissions)
    def permissions(self, namespace: str) -> dict[str, list[str]]:
        policies = self._resources.policies(namespace)
        return dict(policies.get(AUTH_POLICIES, {}).get("namespace_auth", {}))

    def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        unknown = sorted(set(actions) - set(ACTIONS))
        if unknown:
            raise InvalidPermissionError(f"unknown action {', '.join(unknown)} (actions are {', '.join(ACTIONS)})")
        self._set_permissions(namespace, role, sorted(set(actions)))

    def revoke(self, namespace: str, role: str) -> None:
        self._set_permissions(namespace, role, None)

    def _set_permissions(self, namespace: str, role: str, actions: list[str] | None) -> None:
        auth: dict[str, Any] = dict(self._resources.policies(namespace).get(AUTH_POLICIES, {}))
        namespace_auth = dict(auth.get("namespace_auth", {}))
        if actions is None:
            namespace_auth.pop(role, None)
        else:
            namespace_auth[role] = actions
        auth["namespace_auth"] = namespace_auth
        auth.setdefault("destination_auth", {})
        auth.setdefault("subscription_auth_roles", {})
        self._resources.set_policy(namespace, AUTH_POLICIES, auth)
