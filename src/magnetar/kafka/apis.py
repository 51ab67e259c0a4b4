"""The Kafka APIs the handler implements, at the versions it implements them, and the dispatch.

ApiVersions lists exactly this table. Versions stop where a newer one would change what
the broker must do (Fetch v13 names topics by id, Produce v10 brings KIP-890's checks);
clients negotiate down to them.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from magnetar.broker.config import ServiceConfiguration
from magnetar.kafka.access import LIST_TOPICS, LOOKUP, Access
from magnetar.kafka.admin_apis import AdminApis
from magnetar.kafka.config_apis import ConfigApis
from magnetar.kafka.errors import ANSWERABLE, kafka_error
from magnetar.kafka.fetch import FetchApis
from magnetar.kafka.group_apis import GroupApis
from magnetar.kafka.idempotence import ProducerIds
from magnetar.kafka.produce import ProduceApi
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request, encode_body
from magnetar.kafka.sasl import UserNamespaces
from magnetar.kafka.topics import KafkaTopics

if TYPE_CHECKING:
    from magnetar.kafka.txn_apis import TxnApis

#: api key -> (lowest, highest) version implemented
VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (1, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 7),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    17: (1, 1),  # SaslHandshake (v0 would send the SASL bytes unframed)
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    44: (0, 1),  # IncrementalAlterConfigs
    60: (0, 1),  # DescribeCluster
}
NO_RESPONSE = object()
"""What a handler returns for a request Kafka answers with nothing (a produce with acks=0)."""
NODE_ID = 0
_NO_WAIT = datetime.timedelta(0)
_CLUSTER_ID = "magnetar"
_NO_AUTHORIZED_OPERATIONS = -2147483648

Handler = Callable[[Request, Access], Any]


def _open(handler: Callable[[Request], Any]) -> Handler:
    """A handler whose request touches nothing a role could be refused (ApiVersions)."""
    return lambda request, _access: handler(request)


class KafkaApis:
    def __init__(self, topics: KafkaTopics, config: ServiceConfiguration) -> None:
        self.topics = topics
        self.config = config
        self.versions = VERSIONS
        self._api_versions: dict[int, bytes] = {}
        self.connections: set[Any] = set()
        self.produce = ProduceApi(topics, config, NO_RESPONSE)
        self._fetch = FetchApis(topics)
        self.admin = AdminApis(config)
        self.configs = ConfigApis(config)
        self.groups = GroupApis(NODE_ID, transactions=config.transactionCoordinatorEnabled)
        self._handlers: dict[int, Handler] = {
            0: self.produce.produce,
            1: self._fetch.fetch,
            2: self._fetch.list_offsets,
            3: self.metadata,
            8: self.groups.offset_commit,
            9: self.groups.offset_fetch,
            10: self.groups.find_coordinator,
            11: self.groups.join_group,
            12: self.groups.heartbeat,
            13: self.groups.leave_group,
            14: self.groups.sync_group,
            15: self.groups.describe_groups,
            16: self.groups.list_groups,
            18: _open(self.api_versions),
            19: self.admin.create_topics,
            20: self.admin.delete_topics,
            21: self.admin.delete_records,
            22: self.init_producer_id,
            32: self.configs.describe_configs,
            33: self.configs.alter_configs,
            37: self.admin.create_partitions,
            44: self.configs.incremental_alter_configs,
            60: self.describe_cluster,
        }
        self.user_namespaces = UserNamespaces(config.kafkaTenant, config.kafkaNamespace,
                                              config.kafkaEnableMultiTenantMetadata, topics.broker.namespace_exists)
        self._producer_ids = ProducerIds(lambda count: topics.broker.reserve_ids("kafka-producer-ids", count))
        self._txn: TxnApis | None = None
        if config.transactionCoordinatorEnabled:  # the transactional APIs, answered by TxnApis once built
            from magnetar.kafka.txn_apis import VERSIONS as TXN_VERSIONS  # noqa: PLC0415 (transactions on only)

            self.versions = {**VERSIONS, **TXN_VERSIONS}
            for key in TXN_VERSIONS:
                self._handlers[key] = lambda request, access: self.transactional().handlers()[  # type: ignore[union-attr]
                    request.api_key](request, access)

    def transactional(self) -> TxnApis | None:
        """The transactional APIs, built on first use (None: transactionCoordinatorEnabled is off);
        from then on Produce stores transactional batches through the broker's transactions."""
        if self._txn is None:
            coordinator = self.topics.broker.transactions
            if coordinator is None:
                return None
            from magnetar.kafka.txn_apis import TxnApis  # noqa: PLC0415 (transactions on only)

            self._txn = TxnApis(self.topics.broker, coordinator, self._producer_ids.allocate)
            self.produce.transactions = self._txn.transactions
        return self._txn

    def access(self, role: str | None, address: tuple[str, int], namespace: str | None = None) -> Access:
        """A connection's access: its role, as it reaches this listener, to its namespace's topics
        (the listener's, `kafkaTenant/kafkaNamespace`, unless its SASL user name chose another)."""
        return Access(self.topics.in_namespace(namespace or self.topics.namespace), role, address)

    def handle(self, request: Request, access: Access) -> Any | Awaitable[Any]:
        return self._handlers[request.api_key](request, access)

    def _api_keys(self, module: Any) -> tuple[Any, ...]:
        return tuple(build(module, "ApiVersion", api_key=key, min_version=low, max_version=high)
                     for key, (low, high) in sorted(self.versions.items()))

    def api_versions(self, request: Request) -> bytes:
        """Encoded once per version: a client may send it before authenticating, as often as it likes."""
        body = self._api_versions.get(request.api_version)
        if body is None:
            module = response_module(18, request.api_version)
            body = self._api_versions[request.api_version] = encode_body(18, request.api_version, build(
                module, "ApiVersionsResponse", error_code=ErrorCode.none, api_keys=self._api_keys(module),
                throttle_time=_NO_WAIT))
        return body

    def unsupported_api_versions(self) -> Any:
        """ApiVersions v0 with UNSUPPORTED_VERSION: how a broker answers a newer client's ApiVersions."""
        module = response_module(18, 0)
        return build(module, "ApiVersionsResponse", error_code=ErrorCode.unsupported_version,
                     api_keys=self._api_keys(module), throttle_time=_NO_WAIT)

    def metadata(self, request: Request, access: Access) -> Any:
        """Topics named are looked up (and created) only for a role that may look them up; the
        listing of all topics is the namespace's topic list, for a role that may read it."""
        module = response_module(3, request.api_version)
        body = request.body
        if body.topics is None:
            names = access.topics.names() if access.namespace(LIST_TOPICS) else []
        else:
            names = [t.name for t in body.topics if t.name is not None]
        create = bool(getattr(body, "allow_auto_topic_creation", True))
        topics = tuple(self._topic_metadata(module, name, create, access) for name in names)
        broker = build(module, "MetadataResponseBroker", node_id=NODE_ID, host=access.address[0],
                       port=access.address[1], rack=None)
        return build(module, "MetadataResponse", throttle_time=_NO_WAIT, brokers=(broker,), cluster_id=_CLUSTER_ID,
                     controller_id=NODE_ID, topics=topics, cluster_authorized_operations=_NO_AUTHORIZED_OPERATIONS)

    def describe_cluster(self, request: Request, access: Access) -> Any:
        """This broker, the cluster's only one and its controller, as the listener's clients reach it."""
        module = response_module(60, request.api_version)
        broker = build(module, "DescribeClusterBroker", broker_id=NODE_ID, host=access.address[0],
                       port=access.address[1], rack=None)
        return build(module, "DescribeClusterResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none,
                     error_message=None, endpoint_type=getattr(request.body, "endpoint_type", 1),
                     cluster_id=_CLUSTER_ID, controller_id=NODE_ID, brokers=(broker,),
                     cluster_authorized_operations=_NO_AUTHORIZED_OPERATIONS)

    def _topic_metadata(self, module: Any, name: str, create: bool, access: Access) -> Any:
        try:
            access.topic(LOOKUP, name)
        except ANSWERABLE as exc:
            count, error = None, kafka_error(exc)[0]
        else:
            count = access.topics.partitions(name)
            if count is None and create and self.config.allowAutoTopicCreation:
                count = self.admin.auto_create(access, name)
            error = ErrorCode.none if count is not None else ErrorCode.unknown_topic_or_partition
        partitions = tuple(build(module, "MetadataResponsePartition", error_code=ErrorCode.none, partition_index=i,
                                 leader_id=NODE_ID, leader_epoch=0, replica_nodes=(NODE_ID,), isr_nodes=(NODE_ID,),
                                 offline_replicas=()) for i in range(count or 0))
        return build(module, "MetadataResponseTopic", error_code=error, name=name, topic_id=uuid.UUID(int=0),
                     is_internal=False, partitions=partitions, topic_authorized_operations=_NO_AUTHORIZED_OPERATIONS)

    def init_producer_id(self, request: Request, access: Access) -> Any:
        """A producer id for idempotence; a producer that names its id and epoch gets the next epoch.
        A transactional id is the transactional APIs' (TxnApis); with transactions off it gets
        NOT_COORDINATOR, Kafka's answer from a broker that is not the id's transaction coordinator."""
        module = response_module(22, request.api_version)
        body = request.body
        if body.transactional_id is not None:
            transactional = self.transactional()
            if transactional is not None:
                return transactional.init_producer_id(request, access)
            return build(module, "InitProducerIdResponse", throttle_time=_NO_WAIT, producer_id=-1, producer_epoch=-1,
                         error_code=ErrorCode.not_coordinator)
        known = getattr(body, "producer_id", -1)
        if known >= 0:
            producer_id, epoch = known, body.producer_epoch + 1
        else:
            producer_id, epoch = self._producer_ids.allocate(), 0
        return build(module, "InitProducerIdResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none,
                     producer_id=producer_id, producer_epoch=epoch)
