"""Taking back what a role may no longer hold. When a namespace's permissions (its own or
a topic's) or a tenant's admins change, the open producers and consumers of that
namespace or tenant are checked again at once, and those whose role lost the right are
closed, as Pulsar's topics do on a policies update (onPoliciesUpdate: each producer's and
consumer's checkPermissionsAsync). The client is told (CLOSE_PRODUCER, CLOSE_CONSUMER),
tries to come back, and is refused with AuthorizationError.

Driven by the change itself (NamespaceResources tells its watchers), not by a timer: a
revocation takes effect before the admin request that made it answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from magnetar.broker.auth.authorization import AuthorizationService, Resource
from magnetar.broker.auth.operations import PRODUCE, SUBSCRIBE, Need

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_topic import AbstractTopic

log = logging.getLogger(__name__)


class HandleRevalidator:
    def __init__(self, authorization: AuthorizationService, topics: Callable[[], Iterable[AbstractTopic]]) -> None:
        self._authorization = authorization
        self._topics = topics

    def changed(self, scope: str) -> None:
        """Permissions or admins of `scope` (a tenant, or `tenant/namespace`) changed."""
        if not self._authorization.enabled:
            return
        for topic in list(self._topics()):
            name = topic.name
            if scope not in (name.tenant, name.namespace_name):
                continue
            resource = Resource.of_topic(name)
            topic.disconnect_clients(
                producers=lambda producer, r=resource: self._lost(PRODUCE.need, producer.cnx.role, r, "producer"),
                consumers=lambda consumer, r=resource: self._lost(SUBSCRIBE.need, consumer.cnx.role, r, "consumer"))

    def _lost(self, need: Need, role: str | None, resource: Resource, kind: str) -> bool:
        if self._authorization.permits(need, role, resource):
            return False
        log.info("closing the %s of role %r %s: its permission was revoked", kind, role, resource)
        return True
