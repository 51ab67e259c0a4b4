"""The remote cluster as a replicator's producer sees it: one connection pool per cluster,
lookups on its brokers' service URL, and a producer that sends ready-made SEND frames and
hands receipts back in order."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from magnetar.admin_client import AdminClient, AdminError
from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.policies.clusters import ClusterResources
from magnetar.client.aio.connection import Connection
from magnetar.client.aio.lookup import LookupService
from magnetar.client.aio.pool import ConnectionPool, PoolConfig
from magnetar.replication.remote_security import RemoteEndpoint, RemoteSettingsError, remote_endpoint
from magnetar.wire import client_commands as cc
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

log = logging.getLogger(__name__)


class RemoteUnavailableError(Exception):
    """The remote cluster cannot be produced to now (no URL, not reachable, refused)."""


class RemoteCluster:
    """How to reach one remote cluster, read from its ClusterData (and broker.conf's client
    settings, see remote_security) at every (re)connect, so an update of its URLs or
    credentials takes effect at the next one; `changed` wakes the replicators backing off."""

    def __init__(self, name: str, clusters: ClusterResources, config: ServiceConfiguration,
                 operation_timeout: float) -> None:
        self.name = name
        self._clusters = clusters
        self._config = config
        self._timeout = operation_timeout
        self._data: dict[str, Any] | None = None
        self._endpoint: RemoteEndpoint | None = None
        self._pool: ConnectionPool | None = None
        self._lookup: LookupService | None = None
        self._producer_ids = itertools.count()
        self.changed = asyncio.Event()
        """Set when the cluster's data changes: a replicator backing off tries again at once."""

    def _current(self) -> RemoteEndpoint:
        data = self._clusters.stored(self.name) or {}
        if data != self._data or self._endpoint is None:
            self.close()
            try:
                self._endpoint = remote_endpoint(self.name, data, self._config)
            except RemoteSettingsError as exc:
                raise RemoteUnavailableError(str(exc)) from None
            self._data = data
        return self._endpoint

    def _lookup_service(self) -> LookupService:
        endpoint = self._current()
        if self._lookup is None:
            self._pool = ConnectionPool(PoolConfig(operation_timeout=self._timeout, connection_timeout=self._timeout,
                                                   security=endpoint.security))
            self._lookup = LookupService(self._pool, endpoint.broker_url)
        return self._lookup

    async def create_producer(self, topic: str, name: str, handler: RemoteProducer) -> None:
        """Open `handler`'s producer on `topic` in the remote cluster."""
        lookup = self._lookup_service()
        try:
            logical, physical = await lookup.broker_for(topic)
            assert self._pool is not None
            conn = await self._pool.get(logical, physical)
            producer_id = next(self._producer_ids)
            conn.producers[producer_id] = handler
            handler.attach(conn, producer_id)
            await conn.request(lambda rid: cc.producer(rid, producer_id, topic, producer_name=name,
                                                       user_provided_name=True))
        except BaseException as exc:
            # the remote may have made the producer (its answer lost, or this replicator stopped
            # meanwhile): close it there, or the next replicator of that name is ProducerBusy
            handler.close()
            if isinstance(exc, Exception):
                raise RemoteUnavailableError(f"cannot produce to {topic} in cluster {self.name}: {exc}") from exc
            raise

    async def create_topic(self, topic: TopicName, partitions: int) -> None:
        """Create `topic` on the remote as Pulsar's replicator does before it produces: a
        partitioned topic with this cluster's partitions (`partitions` of its base topic, 0:
        not partitioned), through the remote's admin API. One that exists is fine unless its
        partitions cannot hold this one (RemoteUnavailableError, the replicator backs off)."""
        endpoint = self._current()
        if not endpoint.admin_url:
            return  # nothing to ask: the remote's auto-creation makes it, as a plain topic
        security = endpoint.admin_security
        admin = AdminClient(endpoint.admin_url, self._timeout, authentication=security.authentication,
                            tls_trust_certs_file_path=security.tls_trust_certs_file_path,
                            tls_allow_insecure_connection=security.tls_allow_insecure_connection,
                            tls_validate_hostname=security.tls_validate_hostname,
                            tls_certificate=security.tls_certificate)
        try:
            await asyncio.to_thread(_create_topic, admin, topic, partitions)
        except AdminError as exc:
            raise RemoteUnavailableError(f"cannot create {topic} in cluster {self.name}: {exc}") from exc

    def cluster_changed(self) -> None:
        """Wake the replicators backing off (the data is read again at their next connect)."""
        self.changed.set()
        self.changed.clear()  # the waiters are woken already; later ones wait for the next change

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
        self._pool = self._lookup = None
        self._endpoint = self._data = None


def _create_topic(admin: AdminClient, topic: TopicName, partitions: int) -> None:
    """Runs in a thread (the admin client blocks)."""
    base = str(topic.partitioned_topic_name)
    try:
        if partitions:
            admin.create_partitioned_topic(base, partitions)
        else:
            admin.create_topic(str(topic))
    except AdminError as exc:
        if exc.status != 409:
            raise
    if partitions and admin.partitions(base) < partitions:
        _add_partitions(admin, base, partitions, topic.partition_index)


def _add_partitions(admin: AdminClient, base: str, partitions: int, index: int) -> None:
    """The remote's partitioned topic has fewer partitions than here: it gets this many, as
    Pulsar's update of a replicated partitioned topic gives every cluster (there only, so it
    goes no further). Another partition's replicator may have done it meanwhile; a topic there
    that is not partitioned cannot grow (AdminError: partition `index` has nowhere to go)."""
    try:
        admin.update_partitioned_topic(base, partitions, local_only=True)
    except AdminError:
        if admin.partitions(base) <= index:
            raise


class RemoteProducer:
    """The replicator's producer on one connection: receipts and the end of the producer
    (an error, the broker closing it, the connection lost) go to the callbacks."""

    def __init__(self, on_receipt: Callable[[pb.CommandSendReceipt], None], on_lost: Callable[[str], None]) -> None:
        self._on_receipt = on_receipt
        self._on_lost = on_lost
        self.conn: Connection | None = None
        self.producer_id = -1

    def attach(self, conn: Connection, producer_id: int) -> None:
        self.conn, self.producer_id = conn, producer_id

    def detach(self) -> None:
        if self.conn is not None:
            self.conn.producers.pop(self.producer_id, None)
        self.conn = None

    @property
    def address(self) -> str:
        return self.conn.physical_url if self.conn is not None else ""

    def send(self, frame: bytes) -> None:
        if self.conn is not None:
            self.conn.write(frame)

    def close(self) -> None:
        """Close the producer on the remote broker (the connection stays, shared)."""
        conn = self.conn
        self.detach()
        if conn is not None and not conn.closed:
            request = conn.request(lambda rid: cc.close_producer(rid, self.producer_id))
            task = asyncio.ensure_future(request)
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # -- ProducerHandler
    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        self._on_receipt(receipt)

    def on_send_error(self, error: pb.CommandSendError) -> None:
        self.detach()
        self._on_lost(f"send error {pb.ServerError.Name(error.error)}: {error.message}")

    def on_broker_close(self, *, now: bool = False) -> None:
        self.conn = None
        self._on_lost("the remote broker closed the producer")

    def connection_closed(self, conn: Connection) -> None:
        self.conn = None
        self._on_lost("connection lost")
