"""One topic replicated to one remote cluster (Pulsar's GeoPersistentReplicator).

A task connects a producer to the remote cluster (backing off from 0.1 s to a minute, as
Pulsar's replicator does), then reads the topic from its cursor's mark-delete position and
sends what it reads, at most `replicationProducerQueueSize` entries unanswered. A receipt
deletes its entry from the cursor; entries that stay here (see entries.outgoing) are
deleted as they are read. When the producer is lost, whatever was unanswered is read again
after the reconnect: the remote deduplicates it by source position when deduplication is on
there, as Pulsar relies on.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections import deque
from typing import NamedTuple

from magnetar.broker.schema_registry import SchemaRegistryService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.topics.publish_rate import PublishRateLimiter
from magnetar.broker.topics.replicators import replicator_cursor_name, replicator_dispatch_rate
from magnetar.broker.topics.stats import MessageCounter
from magnetar.client.backoff import Backoff
from magnetar.replication.entries import MarkerSink, SchemaNeededError, outgoing
from magnetar.replication.remote import RemoteCluster, RemoteProducer, RemoteUnavailableError
from magnetar.replication.schemas import RemoteSchemas, SchemaRefusedError
from magnetar.storage import Position, StorageClosedError
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)


class _InFlight(NamedTuple):
    """An entry sent (or, with no messages, skipped behind one sent) and not yet answered."""

    position: Position
    sequence_id: int
    messages: int
    size: int

_READ_BATCH = 100  # entries one turn of the loop reads and sends at most
_MAX_IN_FLIGHT_BYTES = 16 << 20
"""Bytes sent and not yet answered at most (one entry more, whatever its size): a remote that
stops reading holds this much of the broker's memory, not a queue's worth of large entries."""
_MAX_BACKOFF = 60.0


class Replicator:
    def __init__(self, topic: PersistentTopic, remote: RemoteCluster, partitions: int,
                 schemas: SchemaRegistryService) -> None:
        """`partitions`: of the partitioned topic `topic` is a partition of (0: not one); `schemas`:
        this broker's registry, whose versions the remote is given before messages written with them."""
        config = topic.context.config
        self.topic = topic
        self.remote = remote
        self._partitions = partitions
        self._create_remote_topic = config.createTopicToRemoteClusterForReplication
        self.local_cluster = config.clusterName
        self._prefix = config.replicatorPrefix
        self.producer_name = f"{self._prefix}.{self.local_cluster}-->{remote.name}"
        start = "earliest" if config.replicationStartAt == "earliest" else "latest"
        self.cursor = topic.ledger.open_cursor(replicator_cursor_name(self._prefix, remote.name), start)
        self._window = config.replicationProducerQueueSize
        self._schemas = RemoteSchemas(schemas, topic.name)
        self._rate_version = -1
        self._limiter: PublishRateLimiter | None = None
        self._in_flight: deque[_InFlight] = deque()
        self._in_flight_bytes = 0
        self._wake = asyncio.Event()
        self._lost: str | None = None
        self.last_error = ""
        """Why the replicator is not connected now (empty once it is)."""
        self.connected_since: str = ""
        self._address = ""
        self.outbound = MessageCounter()
        self.closed = False
        self.markers: MarkerSink | None = None
        """Where the markers the remote replicated here go (replicated subscriptions)."""
        topic.append_listeners.append(self._wake.set)
        self._task = asyncio.ensure_future(self._run())

    # -- the task
    async def _run(self) -> None:
        backoff = Backoff(0.1, _MAX_BACKOFF)
        while not self.closed:
            producer = RemoteProducer(self._received, self._producer_lost)
            try:
                if self._create_remote_topic:
                    await self.remote.create_topic(self.topic.name, self._partitions)
                    self._create_remote_topic = False  # once: a deletion there is not undone by reconnects
                await self.remote.create_producer(str(self.topic.name), self.producer_name, producer)
            except RemoteUnavailableError as exc:
                self.last_error = str(exc)
                delay = backoff.next()
                log.warning("[%s] replicator to %s: %s; retrying in %.1f s", self.topic.name, self.remote.name, exc,
                            delay)
                await self._back_off(delay)
                continue
            backoff.reset()
            self._lost = None
            self.last_error = ""
            self._schemas.reset()
            self.connected_since = datetime.datetime.now(datetime.UTC).isoformat()
            self._address = producer.address
            log.info("[%s] replicating to %s as %s", self.topic.name, self.remote.name, self.producer_name)
            try:
                await self._pump(producer)
            except StorageClosedError:
                return  # the topic closed under the task: close() follows
            except SchemaRefusedError as exc:
                # nothing written with that schema can go there; the cursor keeps it all until the
                # topic is loaded again (an unload, a restart) with the remote's schema put right
                self.last_error = f"stopped: {exc}"
                log.error("[%s] replicator to %s stopped: %s", self.topic.name, self.remote.name, exc)
                return
            finally:
                producer.close()
                self._in_flight.clear()
                self._in_flight_bytes = 0
                self.connected_since = ""
            if not self.closed:
                self.last_error = f"lost its producer: {self._lost}"
                delay = backoff.next()
                log.warning("[%s] replicator to %s lost its producer (%s); reconnecting in %.1f s", self.topic.name,
                            self.remote.name, self._lost, delay)
                await self._back_off(delay)

    async def _back_off(self, delay: float) -> None:
        """Wait `delay`, or less if the remote cluster's data changes meanwhile (new URLs or credentials)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.remote.changed.wait(), delay)

    async def _pump(self, producer: RemoteProducer) -> None:
        """Read and send until the producer is lost; receipts come in through `_received`."""
        ledger = self.topic.ledger
        position = ledger.next_position(self.cursor.mark_delete_position)
        while not self.closed and self._lost is None:
            self._wake.clear()
            room = self._window - len(self._in_flight)
            byte_room = _MAX_IN_FLIGHT_BYTES - self._in_flight_bytes
            entries = ledger.read_entries(position, min(room, _READ_BATCH), byte_room) \
                if room > 0 and byte_room > 0 else []
            if not entries:
                await self._wake.wait()
                continue
            position, pause = self._send(entries, producer)
            if isinstance(pause, SchemaNeededError):
                await self._register_schema(pause.version, producer)
            else:  # a pause of the dispatch rate, else one batch a turn: the loop serves everyone else between
                await asyncio.sleep(pause)

    def _send(self, entries: list[tuple[Position, bytes]], producer: RemoteProducer) \
            -> tuple[Position, SchemaNeededError | float]:
        """Send `entries` in order until one needs a schema the remote lacks, or the replicator
        dispatch rate is spent: where to read on from, and why to pause (0.0: no reason)."""
        ledger = self.topic.ledger
        limiter = self._dispatch_limiter()
        resume, pause = ledger.next_position(entries[-1][0]), 0.0
        skipped: list[Position] = []
        for at, data in entries:
            try:
                send = outgoing(data, at, producer.producer_id, self.local_cluster, self.remote.name,
                                self._schemas.versions, self.markers)
            except SchemaNeededError as exc:
                resume, pause = at, exc  # sent from here once the remote has the schema
                break
            if send is None:
                if not self._in_flight:
                    skipped.append(at)
                else:  # deleted in turn, after what is on its way (receipts delete in order)
                    self._in_flight.append(_InFlight(at, -1, 0, 0))
                continue
            self._in_flight.append(_InFlight(at, send.sequence_id, send.messages, len(send.send)))
            self._in_flight_bytes += len(send.send)
            producer.send(send.send)
            wait = limiter.consume(send.messages, len(send.send)) if limiter is not None else 0.0
            if wait > 0:
                resume, pause = ledger.next_position(at), wait
                break
        if skipped:
            self.cursor.delete(skipped)
        return resume, pause

    def _dispatch_limiter(self) -> PublishRateLimiter | None:
        """The bucket of the topic's replicator dispatch rate, None without one; read again when
        a policy changes, kept (not refilled) while the rate stays the same."""
        policies = self.topic.context.policies
        if policies.version != self._rate_version:
            self._rate_version = policies.version
            rate = replicator_dispatch_rate(policies, self.topic.context.config, self.topic.name)
            if rate == (0, 0):
                self._limiter = None
            elif self._limiter is None or self._limiter.rate != rate:
                self._limiter = PublishRateLimiter(rate)
        return self._limiter

    async def _register_schema(self, version: bytes, producer: RemoteProducer) -> None:
        try:
            await self._schemas.register(version, producer)
        except RemoteUnavailableError as exc:
            self._producer_lost(str(exc))

    def _received(self, receipt: pb.CommandSendReceipt) -> None:
        """The remote stored (or had stored) the oldest entry on its way: delete it and the
        skipped ones queued behind it from the cursor. A receipt for anything else (a remote
        that lies or lost count) deletes nothing: the producer is dropped and what was on its
        way is sent again."""
        if self._lost is not None:
            return
        if not self._in_flight or self._in_flight[0].sequence_id != receipt.sequence_id:
            self._producer_lost(f"a receipt for sequence id {receipt.sequence_id}, which was not the next one")
            return
        sent = self._in_flight.popleft()
        self.outbound.add(sent.messages, sent.size)
        self._in_flight_bytes -= sent.size
        done = [sent.position]
        while self._in_flight and self._in_flight[0].messages == 0:
            done.append(self._in_flight.popleft().position)
        if done and not self.closed:
            self.cursor.delete(done)
        self._wake.set()

    def _producer_lost(self, reason: str) -> None:
        self._lost = reason
        self._wake.set()

    # -- TopicReplicator
    def backlog(self) -> int:
        return self.cursor.num_unacked_entries()

    def delay_seconds(self) -> float:
        """How old the oldest message not yet replicated is (0 with nothing to replicate)."""
        first = self.cursor.first_unacked_position()
        if first is None:
            return 0.0
        try:
            entry = self.topic.ledger.read_entry(first)
            publish_time = parse_message_metadata(entry).publish_time if entry is not None else 0
        except (WireError, StorageClosedError):
            return 0.0
        return max(0.0, time.time() - publish_time / 1000) if publish_time else 0.0

    def stats(self) -> dict[str, object]:
        """Pulsar's ReplicatorStats; the inbound side is the remote's replicator producing here."""
        inbound_name = f"{self._prefix}.{self.remote.name}-->{self.local_cluster}"
        inbound = next((p for p in self.topic.producers.values() if p.name == inbound_name), None)
        return {
            "msgRateIn": inbound.inbound.message_rate if inbound else 0.0,
            "msgThroughputIn": inbound.inbound.byte_rate if inbound else 0.0,
            "msgRateOut": self.outbound.message_rate,
            "msgThroughputOut": self.outbound.byte_rate,
            "msgOutCounter": self.outbound.messages,
            "bytesOutCounter": self.outbound.bytes,
            "msgRateExpired": 0.0,
            "replicationBacklog": self.backlog(),
            "connected": bool(self.connected_since),
            "replicationDelayInSeconds": round(self.delay_seconds()),
            "inboundConnection": inbound.cnx.remote if inbound else "",
            "outboundConnection": self._address if self.connected_since else "",
            "outboundConnectedSince": self.connected_since,
            "lastError": self.last_error,
        }

    def sample(self, now: float) -> None:
        self.outbound.sample(now)

    def close(self) -> None:
        """Stop: the task ends, the remote producer closes, the cursor stays where receipts left it."""
        if self.closed:
            return
        self.closed = True
        if self._wake.set in self.topic.append_listeners:
            self.topic.append_listeners.remove(self._wake.set)
        self._task.cancel()
