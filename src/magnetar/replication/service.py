"""Which replicators run: one per loaded persistent topic and remote cluster it replicates
to (the topic's replication clusters, else its namespace's, minus this cluster), kept so as
topics load and topics' or namespaces' clusters change. A remote taken out of the list loses its replicator and its
cursor, as in Pulsar; the cursor of one still listed survives restarts, so replication
carries on where the remote's last receipt left it."""

from __future__ import annotations

import logging
import weakref

from magnetar.broker.policies.topic_policies import REPLICATION_CLUSTERS
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.topics.replicators import has_replicator_prefix, replicator_cursor_name
from magnetar.replication.remote import RemoteCluster
from magnetar.replication.replicator import Replicator
from magnetar.replication.subscriptions.controller import SubscriptionsController
from magnetar.wire.topic_name import TopicName

log = logging.getLogger(__name__)
_OPERATION_TIMEOUT = 30.0


class ReplicationService:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._resources = service.resources
        self._remotes: dict[str, RemoteCluster] = {}
        self._controllers: weakref.WeakValueDictionary[TopicName, SubscriptionsController] = \
            weakref.WeakValueDictionary()
        """Per replicated topic, its replicated subscriptions' controller (PIP-33). The topic
        holds it (its listeners, its replicators' marker sinks): a topic unloaded for good
        takes its controller with it."""
        self._stopped = False

    def start(self) -> None:
        self.service.topic_watchers.append(self.reconcile)
        self._resources.watch(self._policies_changed)
        self._resources.clusters.watch(self._cluster_changed)
        self.service.policies.watch(self._topic_policies_changed)
        for topic in list(self.service.topics.values()):
            self.reconcile(topic)

    def _topic_policies_changed(self, name: TopicName) -> None:
        if self._stopped:
            return
        for topic in list(self.service.topics.values()):
            if name in (topic.name, topic.name.partitioned_topic_name):
                self.reconcile(topic)

    def _cluster_changed(self, cluster: str) -> None:
        remote = self._remotes.get(cluster)
        if remote is not None and not self._stopped:
            remote.cluster_changed()

    def _policies_changed(self, scope: str) -> None:
        if self._stopped or "/" not in scope:
            return  # a tenant's info: its namespaces' lists are what decide
        for topic in list(self.service.topics.values()):
            if topic.name.namespace_name == scope:
                self.reconcile(topic)

    def _wanted(self, topic: PersistentTopic) -> set[str]:
        """The topic's replication clusters, else its namespace's, but this one."""
        clusters = self.service.policies.configured(topic.name, REPLICATION_CLUSTERS) or ()
        return set(clusters) - {self._resources.clusters.local}

    def reconcile(self, topic: PersistentTopic) -> None:
        """Start the replicators `topic` lacks, stop (and forget the cursors of) those no longer wanted."""
        if topic.ledger.closed:
            return
        wanted = self._wanted(topic)
        prefix = self.service.config.replicatorPrefix
        for remote in set(topic.replicators) - wanted:
            topic.replicators.pop(remote).close()
        for name in [n for n in topic.ledger.cursors if has_replicator_prefix(n, prefix)]:
            if name not in {replicator_cursor_name(prefix, remote) for remote in wanted}:
                topic.ledger.delete_cursor(name)
                log.info("[%s] no longer replicated to %s", topic.name, name.removeprefix(prefix + "."))
        name = topic.name
        partitions = (self.service.partitions_of(name.partitioned_topic_name) or 0) if name.partition_index >= 0 else 0
        for remote in sorted(wanted - set(topic.replicators)):
            topic.replicators[remote] = Replicator(topic, self._remote(remote), partitions, self.service.schemas)
        self._reconcile_subscriptions(topic)

    def _reconcile_subscriptions(self, topic: PersistentTopic) -> None:
        """A replicated topic has a controller for its replicated subscriptions (while
        enableReplicatedSubscriptions), which its replicators hand the markers they meet."""
        controller = self._controllers.get(topic.name)
        if controller is not None and (controller.topic is not topic or not topic.replicators):
            controller.close()
            controller = None
        if not topic.replicators or not self.service.config.enableReplicatedSubscriptions:
            return
        if controller is None:
            controller = self._controllers[topic.name] = SubscriptionsController(
                topic, lambda: all(isinstance(r, Replicator) and r.connected_since for r in topic.replicators.values()),
                self._controller_closed)
        for replicator in topic.replicators.values():
            if isinstance(replicator, Replicator):
                replicator.markers = controller.received

    def _controller_closed(self, controller: SubscriptionsController) -> None:
        if self._controllers.get(controller.topic.name) is controller:
            del self._controllers[controller.topic.name]

    def _remote(self, name: str) -> RemoteCluster:
        remote = self._remotes.get(name)
        if remote is None:
            remote = self._remotes[name] = RemoteCluster(name, self._resources.clusters, self.service.config,
                                                       _OPERATION_TIMEOUT)
        return remote

    def stop(self) -> None:
        """Before the broker stops: replicators end (their cursors stay), connections close."""
        self._stopped = True
        if self.reconcile in self.service.topic_watchers:
            self.service.topic_watchers.remove(self.reconcile)
        for topic in list(self.service.topics.values()):
            for replicator in topic.replicators.values():
                replicator.close()
            topic.replicators.clear()
        for controller in list(self._controllers.values()):
            controller.close()
        for remote in self._remotes.values():
            remote.close()
        self._remotes.clear()
