"""`/admin/v2/{persistent,non-persistent}/{tenant}/{namespace}[/{topic}...]`: Pulsar's
topics resource (PersistentTopics / NonPersistentTopics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar import web
from magnetar.admin.backlog_quotas import backlog_quota_routes
from magnetar.admin.compaction import compaction_routes
from magnetar.admin.messages import entry_response
from magnetar.admin.policy_table import PolicyRoute, policy_table
from magnetar.admin.responses import (
    bool_param,
    fail,
    int_param,
    json_body,
    no_content,
    path_int,
    policy_routes,
)
from magnetar.admin.retention import default_size_quota, retention_routes, trim_topics
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.policies.backlog_quota import BACKLOG_QUOTA
from magnetar.broker.policies.retention import RETENTION
from magnetar.broker.policies.topic_policies import MESSAGE_TTL, REPLICATION_CLUSTERS
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.internal_stats import internal_stats
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.storage import NoSuchEntryError, Position
from magnetar.storage.message_finder import EntrySequence, SearchResult, find_by_index, find_first_at_or_after
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

if TYPE_CHECKING:
    from collections.abc import Callable

    from magnetar.broker.topics.nonpersistent.non_persistent_topic import NonPersistentTopic
    from magnetar.storage.managed_ledger import ManagedLedger

PERSISTENT = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
#: Paths that serve both domains; the others read storage, which a non-persistent topic has none of.
DOMAIN = "/admin/v2/{domain:persistent|non-persistent}"
ANY_TOPIC = DOMAIN + "/{tenant}/{namespace}/{topic}"
Mode = pb.CommandGetTopicsOfNamespace
_SUMMED_STATS = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter",
                 "bytesOutCounter", "msgOutCounter")


class TopicsApi:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(DOMAIN + "/{tenant}/{namespace}", self.list_topics),
            web.put(PERSISTENT, self.create_topic),
            web.get(ANY_TOPIC + "/partitions", self.get_partitions),
            web.put(ANY_TOPIC + "/partitions", self.create_partitioned_topic),
            web.get(ANY_TOPIC + "/stats", self.stats),
            web.get(PERSISTENT + "/examinemessage", self.examine_message),
            web.get(PERSISTENT + "/ledger/{ledger}/entry/{entry}", self.get_message_by_id),
            web.delete(ANY_TOPIC, self.delete_topic),
            web.delete(ANY_TOPIC + "/partitions", self.delete_partitioned_topic),
            web.post(ANY_TOPIC + "/partitions", self.update_partitions),
            web.put(ANY_TOPIC + "/unload", self.unload),
            web.get(ANY_TOPIC + "/partitioned-stats", self.partitioned_stats),
            web.get(PERSISTENT + "/internalStats", self.internal_stats),
            web.get(PERSISTENT + "/lastMessageId", self.last_message_id),
            web.get(PERSISTENT + "/getMessageIdByIndex", self.message_id_by_index),
            web.get(PERSISTENT + "/messageid/{timestamp}", self.message_id_by_time),
            web.post(PERSISTENT + "/terminate", self.terminate),
            web.post(PERSISTENT + "/terminate/partitions", self.terminate_partitions),
            web.get(PERSISTENT + "/messageTTL", self.get_ttl),
            web.post(PERSISTENT + "/messageTTL", self.set_ttl),
            web.delete(PERSISTENT + "/messageTTL", self.remove_ttl),
            web.get(PERSISTENT + "/replication", self.get_replication_clusters),
            web.post(PERSISTENT + "/replication", self.set_replication_clusters),
            web.delete(PERSISTENT + "/replication", self.remove_replication_clusters),
            *(route for row in policy_table(self.service) if row.topic_path is not None
              for route in self._policy_routes(row.topic_path, row)),
            web.post(PERSISTENT + "/trim", self.trim),
            *retention_routes(
                self.service, PERSISTENT,
                lambda request: self.service.policies.topic_value(self.topic_name(request), RETENTION),
                lambda request, value: self.service.policies.set_topic_value(self.topic_name(request), RETENTION,
                                                                             value),
                lambda request: default_size_quota(
                    self.service, self.service.policies.topic_value(self.topic_name(request), BACKLOG_QUOTA))),
            *compaction_routes(PERSISTENT + "/compaction", self.service, self.topic_name),
            *backlog_quota_routes(
                PERSISTENT,
                lambda request: self.service.policies.topic_value(self.topic_name(request), BACKLOG_QUOTA),
                lambda request, value: self.service.policies.set_topic_value(self.topic_name(request),
                                                                             BACKLOG_QUOTA, value)),
        ]

    def _policy_routes(self, path: str, row: PolicyRoute) -> list[web.RouteDef]:
        policies, policy = self.service.policies, row.policy
        return policy_routes(
            f"{PERSISTENT}/{path}", path, row.valid,
            lambda request: policies.topic_value(self.topic_name(request), policy),
            lambda request, value: policies.set_topic_value(self.topic_name(request), policy, value))

    # -- helpers
    def topic_name(self, request: web.Request) -> TopicName:
        info = request.match_info
        domain = info.get("domain", "persistent")
        try:
            return self.service.parse_topic(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
        except BrokerServiceError as exc:
            raise fail(412, exc.message) from exc  # Pulsar: Precondition Failed

    def topic(self, request: web.Request) -> PersistentTopic | NonPersistentTopic:
        return self.service.get_topic(str(self.topic_name(request)), create=False)

    def persistent_topic(self, request: web.Request) -> PersistentTopic:
        topic = self.topic(request)
        assert isinstance(topic, PersistentTopic)  # the route names the persistent domain
        return topic

    def persistent_topics(self, request: web.Request) -> list[PersistentTopic]:
        """The topic a request names, or every partition when it names a partitioned topic:
        Pulsar applies subscription operations, trim and the like to each partition."""
        name = self.topic_name(request)
        partitions = self.service.partitions_of(name)
        if partitions is None:
            return [self.persistent_topic(request)]
        topics = [self.service.get_topic(str(name.partition(i)), create=False) for i in range(partitions)]
        return [topic for topic in topics if isinstance(topic, PersistentTopic)]

    def refuse_partitioned(self, request: web.Request, reason: str) -> None:
        """Pulsar's 405 for what it does on one partition only (peek, skip, examine)."""
        if self.service.partitions_of(self.topic_name(request)) is not None:
            raise fail(405, reason)

    # -- handlers
    async def list_topics(self, request: web.Request) -> web.Response:
        info = request.match_info
        namespace = f"{info['tenant']}/{info['namespace']}"
        self.service.resources.policies(namespace)  # 404 for a namespace that does not exist
        mode = Mode.PERSISTENT if info["domain"] == "persistent" else Mode.NON_PERSISTENT
        return web.json_response(self.service.topics_of_namespace(namespace, mode=mode))

    async def create_topic(self, request: web.Request) -> web.Response:
        name = self.topic_name(request)
        if self.service.topic_exists(name) or self.service.partitions_of(name) is not None:
            raise fail(409, f"topic {name} already exists")
        self.service.check_namespace(name)
        self.service.get_topic(str(name))
        return no_content()

    async def get_partitions(self, request: web.Request) -> web.Response:
        """The partition count; with checkAllowAutoCreation (what a client looking up over
        HTTP sends) a missing topic is auto-created as the configuration says."""
        name = self.topic_name(request)
        if bool_param(request, "checkAllowAutoCreation"):
            return web.json_response({"partitions": self.service.partitioned_metadata(str(name))})
        return web.json_response({"partitions": self.service.partitions_of(name) or 0})

    async def create_partitioned_topic(self, request: web.Request) -> web.Response:
        name = self.topic_name(request)
        try:
            partitions = int(await request.text())
        except ValueError as exc:
            raise fail(400, "the body must be the number of partitions") from exc
        self.service.create_partitioned_topic(name, partitions)
        return no_content()

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.topic(request).stats())

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        """Pulsar's PartitionedTopicStats: the partitions' counters summed, each one's on request."""
        name = self.topic_name(request)
        partitions = self.service.partitions_of(name)
        if partitions is None:
            raise fail(404, "Partitioned topic does not exist")
        stats = [self.service.get_topic(str(name.partition(i))).stats() for i in range(partitions)]
        summed: dict[str, object] = {"metadata": {"partitions": partitions}}
        for key in _SUMMED_STATS:
            summed[key] = sum(s[key] for s in stats)  # type: ignore[misc]
        summed["publishers"] = [p for s in stats for p in s["publishers"]]  # type: ignore[attr-defined]
        if bool_param(request, "perPartition"):
            summed["partitions"] = {str(name.partition(i)): s for i, s in enumerate(stats)}
        return web.json_response(summed)

    async def internal_stats(self, request: web.Request) -> web.Response:
        return web.json_response(internal_stats(self.persistent_topic(request)))

    async def last_message_id(self, request: web.Request) -> web.Response:
        return _message_id_json(self.persistent_topic(request).last_message_id())

    async def message_id_by_index(self, request: web.Request) -> web.Response:
        """PIP-415: the entry holding the message with PIP-70 index `index` (the first entry
        after it when that message is gone); 404 when none has it, as on a topic stored
        without indexes."""
        index = int_param(request, "index")
        return self._found(request, "Get message id by index", lambda ledger: find_by_index(ledger, index),
                           f"no message with index {index} or after it")

    async def message_id_by_time(self, request: web.Request) -> web.Response:
        """Pulsar's getMessageIdByTimestamp: the first entry stored (broker time, else publish
        time) at or after `timestamp`, in milliseconds."""
        timestamp = path_int(request, "timestamp")
        return self._found(request, "Get message id by timestamp",
                           lambda ledger: find_first_at_or_after(ledger, timestamp),
                           f"no message at or after {timestamp}")

    def _found(self, request: web.Request, what: str, search: Callable[[ManagedLedger], SearchResult],
               missing: str) -> web.Response:
        """The id of the entry a binary search finds (a few entry reads, however long the topic)."""
        self.refuse_partitioned(request, f"{what} on a partitioned topic is not allowed, "
                                         "please try it on specific topic partition")
        ledger = self.persistent_topic(request).ledger
        found = search(ledger).position if ledger.first_position is not None else None
        if found is None:
            raise fail(404, missing)
        return web.json_response({"ledgerId": found.ledger_id, "entryId": found.entry_id, "partitionIndex": -1})

    async def terminate(self, request: web.Request) -> web.Response:
        """Pulsar's terminate: the topic takes no more messages; answers its last message id."""
        return _message_id_json(self.persistent_topic(request).terminate())

    async def terminate_partitions(self, request: web.Request) -> web.Response:
        """Every partition terminated; answers each one's last message id by partition index."""
        name = self.topic_name(request)
        partitions = self.service.partitions_of(name)
        if partitions is None:
            raise fail(404, "Partitioned topic does not exist")
        last_ids = {}
        for index in range(partitions):
            topic = self.service.get_topic(str(name.partition(index)))
            assert isinstance(topic, PersistentTopic)  # the route names the persistent domain
            last_ids[str(index)] = _message_id_dict(topic.terminate())
        return web.json_response(last_ids)

    async def delete_topic(self, request: web.Request) -> web.Response:
        self.service.delete_topic(self.topic_name(request), force=bool_param(request, "force"))
        return no_content()

    async def delete_partitioned_topic(self, request: web.Request) -> web.Response:
        self.service.delete_partitioned_topic(self.topic_name(request), force=bool_param(request, "force"))
        return no_content()

    async def update_partitions(self, request: web.Request) -> web.Response:
        try:
            partitions = int(await request.text())
        except ValueError as exc:
            raise fail(400, "the body must be the number of partitions") from exc
        self.service.update_partitions(self.topic_name(request), partitions)
        return no_content()

    async def unload(self, request: web.Request) -> web.Response:
        name = self.topic_name(request)
        if not self.service.topic_exists(name):
            raise fail(404, "Topic not found")
        self.service.unload_topic(name)
        return no_content()

    async def examine_message(self, request: web.Request) -> web.Response:
        """The Nth entry from the start (earliest) or from the end (latest), 1-based."""
        self.refuse_partitioned(request, "Examine messages on a partitioned topic is not allowed, please try examine "
                                         "message on specific topic partition")
        topic = self.persistent_topic(request)
        initial = request.query.get("initialPosition", "latest")
        if initial not in ("earliest", "latest"):
            raise fail(400, "initialPosition must be 'earliest' or 'latest'")
        nth = int_param(request, "messagePosition", 1)
        entries = EntrySequence(topic.ledger)
        if not 1 <= nth <= entries.size:
            raise fail(404, f"no message at position {nth} from {initial} (topic has {entries.size} entries)")
        ordinal = nth - 1 if initial == "earliest" else entries.size - nth
        position = entries.position(ordinal)
        return self._entry(position, topic.ledger.read_entry(position))

    async def get_message_by_id(self, request: web.Request) -> web.Response:
        topic = self.persistent_topic(request)
        position = Position(path_int(request, "ledger"), path_int(request, "entry"))
        try:
            data = topic.ledger.read_entry(position)
        except NoSuchEntryError as exc:
            raise fail(404, f"Message not found: {exc}") from exc
        return self._entry(position, data)

    def _entry(self, position: Position, data: bytes) -> web.Response:
        return entry_response(position, data, self.service.config.maxMessageSize * 2)

    async def trim(self, request: web.Request) -> web.Response:
        """Pulsar's trimTopic; on a partitioned topic, every partition."""
        await trim_topics(self.service, self.persistent_topics(request))
        return no_content()

    async def get_ttl(self, request: web.Request) -> web.Response:
        return web.json_response(self.service.policies.topic_value(self.topic_name(request), MESSAGE_TTL))

    async def set_ttl(self, request: web.Request) -> web.Response:
        ttl = int_param(request, "messageTTL")
        if ttl < 0:
            raise fail(412, "Invalid value for message TTL")
        self.service.policies.set_topic_value(self.topic_name(request), MESSAGE_TTL, ttl)
        return no_content()

    async def remove_ttl(self, request: web.Request) -> web.Response:
        self.service.policies.set_topic_value(self.topic_name(request), MESSAGE_TTL, None)
        return no_content()


    async def get_replication_clusters(self, request: web.Request) -> web.Response:
        """The topic's own list (null when it has none and follows its namespace's)."""
        return web.json_response(self.service.policies.topic_value(self.topic_name(request), REPLICATION_CLUSTERS))

    async def set_replication_clusters(self, request: web.Request) -> web.Response:
        """pulsar-admin topics set-replication-clusters: a JSON list, checked as a namespace's is."""
        name = self.topic_name(request)
        clusters = await json_body(request, None)
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise fail(400, "the body must be a JSON list of cluster names")
        checked = self.service.resources.checked_replication_clusters(name.namespace_name, clusters)
        self.service.policies.set_topic_value(name, REPLICATION_CLUSTERS, checked)
        return no_content()

    async def remove_replication_clusters(self, request: web.Request) -> web.Response:
        self.service.policies.set_topic_value(self.topic_name(request), REPLICATION_CLUSTERS, None)
        return no_content()


def _message_id_dict(data: pb.MessageIdData) -> dict[str, int]:
    last = MessageId.from_proto(data)
    return {"ledgerId": last.ledger_id, "entryId": last.entry_id, "partitionIndex": last.partition,
            "batchIndex": last.batch_index}


def _message_id_json(data: pb.MessageIdData) -> web.Response:
    return web.json_response(_message_id_dict(data))
