"""Protocol handlers: other wire protocols served by the same broker onto the same topics.

Pulsar loads a protocol handler (KoP, MoP, AoP) from a NAR named by `messagingProtocols`;
magnetar loads a class from the `magnetar.protocol_handlers` entry-point group by the same
key. The broker never imports a handler. A handler sees the broker only through
`HandlerBroker` and one partition only through `PartitionLog`: publish entries, read them by
PIP-70 offset, find an offset by time, wait for appends, create and delete topics. That
keeps BrokerService's internals free to change under it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.auth.authentication import AuthenticationService
from magnetar.broker.auth.authorization import Resource
from magnetar.broker.auth.operations import Operation
from magnetar.broker.config import ConfigError, ServiceConfiguration
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.policies.backlog_quota import AGE, SIZE, effective_quotas
from magnetar.broker.policies.retention import RETENTION, Retention, check_against_backlog_quota
from magnetar.broker.policies.topic_policies import Policy
from magnetar.broker.tls import TlsConfigError, server_context
from magnetar.broker.topics.latency import LatencySummary
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.topics.topic_limits import encryption_required, send_limits
from magnetar.storage import Position, StorageClosedError, bump_counter
from magnetar.storage.message_finder import (
    entry_first_index,
    entry_last_index,
    find_by_index,
    first_at_or_above,
)
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName
from magnetar.wire.txn import TxnId

if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService
    from magnetar.broker.transactions.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "magnetar.protocol_handlers"
_INDEX_INTERCEPTOR = "AppendIndexMetadataInterceptor"
# cursor properties ('#': magnetar's own, not the subscription's) of a handler's committed offset
_OFFSET_PROPERTY = "#committed.offset"
_OFFSET_METADATA_PROPERTY = "#committed.metadata"
# ledger property: offsets below it were deleted (a handler's DeleteRecords)
_DELETED_BEFORE_PROPERTY = "#records.deleted.before"
_COMPACTED_START = Position(-1, -1)
_COMPACTED_SCAN = 2000  # compacted entries one read may pass over looking for an offset
_COMPACTED_READERS = 64  # next offsets remembered per partition
_ID_COUNTER_PREFIX = "/protocol-handlers/id-counters/"
_STATE_PREFIX = "/protocol-handlers/state/"

AppendCallback = Callable[[int | None, BaseException | None], None]
"""Gets the offset of the first message appended once every entry is durable, or None and the error."""


class ProtocolHandler(Protocol):
    """What the broker starts and stops; built with a `HandlerBroker`."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class PartitionLog:
    """One persistent topic partition as an offset-addressed log (offsets = PIP-70 indexes)."""

    def __init__(self, topic: PersistentTopic, hints: dict[object, Any]) -> None:
        self._topic = topic
        # per partition name: (offset, position) where the last read ended, so a consumer reading
        # on skips find_by_index's binary search (a ledger read a step); under ("start", name)
        # and ("end", name) the first and last entries' positions with the offsets they give, so
        # no fetch reads either entry again until it changes; under ("horizon", name) the same
        # of the compaction horizon, and under ("compacted", name) compacted readers' next
        # offsets with where the compacted view goes on
        self._hints = hints

    @property
    def name(self) -> str:
        return str(self._topic.name)

    def append(self, entries: list[bytes], counts: list[int], done: AppendCallback,
               txn: TxnId | None = None) -> None:
        """Store entries (without broker-entry metadata: the broker stamps it) as one group;
        with `txn`, as messages of that open transaction (their MessageMetadata names it):
        through the topic's transaction buffer, read by no one until it ends."""
        topic = self._topic
        if topic.terminated:
            raise BrokerServiceError(pb.TopicTerminatedError, f"{topic.name} is terminated")
        first = topic.entry_metadata_state.index + 1  # stamping numbers the group's messages from here

        def stored(_positions: list[Position] | None, exc: BaseException | None) -> None:
            done(None if exc is not None else first, exc)

        if txn is None:
            topic.publish_many(entries, counts, counts[-1], stored)
        else:
            topic.publish_transactional(entries, counts, counts[-1], txn, stored)

    def publish_wait(self, messages: int, size: int) -> float:
        """Count a publish against the topic's publish rate: the seconds its publisher must
        now wait (0 without a limit, or within it)."""
        limiter = send_limits(self._topic).publish_limiter
        return limiter.consume(messages, size) if limiter is not None else 0.0

    def end_offset(self, *, stable: bool = True) -> int:
        """Kafka's last stable offset (`stable`), or its high watermark: the offset after the
        last message whose entry is durable and acknowledged, which the last stable offset
        never passes. Messages are numbered when their write starts, so the stamping counter
        (`entry_metadata_state`) runs ahead of this while a write is in flight. StorageClosedError
        once the topic is unloaded or deleted (its client looks it up again)."""
        topic = self._topic
        if topic.ledger.closed:
            raise StorageClosedError(f"{self.name} is closed")
        transactions = topic.transaction_buffer
        if stable and transactions is not None and transactions.max_read_position is not None:
            # Kafka's last stable offset: nothing from an open transaction's first message on
            return entry_first_index(topic.ledger.read_entry(transactions.max_read_position))
        return topic.durable_index + 1

    def aborted_between(self, start: int, end: int) -> list[tuple[str, int]]:
        """(producer name, first offset) of the aborted transactions with messages from `start`
        to `end` (excluded), by Kafka's rule (see TransactionBuffer.aborted_between)."""
        transactions = self._topic.transaction_buffer
        if transactions is None or not transactions.aborted_ranges:
            return []
        return [(aborted.producer, aborted.first) for aborted in transactions.aborted_between(start, end)]

    def hidden(self, entry: bytes) -> bool:
        """Whether `entry` is a marker (a transaction's, or a replicated subscription's on a
        replicated topic) or a message of an aborted transaction: served as a control batch,
        which Kafka consumers step over."""
        topic = self._topic
        transactions = topic.transaction_buffer
        if transactions is None and not topic.replicators:
            return False
        metadata = parse_message_metadata(entry)
        return metadata.HasField("marker_type") or (transactions is not None and transactions.hides(metadata))

    def start_offset(self) -> int:
        """Kafka's log start: the offset of the first message still stored, or the end when
        none is (never written, or all trimmed); never past the end."""
        end = self.end_offset()
        ledger = self._topic.ledger
        first = ledger.first_position
        if first is None or not ledger.has_entry(first):
            return end
        known = self._hints.get(("start", self.name))
        if known is not None and known[1] == first:
            return min(known[0], end)
        start = entry_first_index(ledger.read_entry(first))
        self._hints[("start", self.name)] = (start, first)  # the first entry changes only when trimmed
        return min(start, end)

    def read(self, offset: int, max_bytes: int, max_entries: int = 500, *, stable: bool = True) -> list[bytes]:
        """Stored entries from the one holding `offset` on, at most `max_bytes` (but at least one),
        none past the last stable offset (`stable`) or else the high watermark (an entry durable
        whose append is not yet acknowledged)."""
        ledger = self._topic.ledger
        end = self.end_offset(stable=stable)
        hint = self._hints.get(self.name)
        if hint is not None and hint[0] == offset and ledger.has_entry(hint[1]):
            position: Position | None = hint[1]
        else:
            position = find_by_index(ledger, offset).position
        if position is None or offset >= end:
            return []
        read = ledger.read_entries(position, max_entries, max_bytes)
        entries = [bytes(entry) for _, entry in read]
        while entries and entry_last_index(entries[-1]) >= end:  # the end is always some group's last index
            entries.pop()
            read.pop()
        if read:
            self._hints[self.name] = (entry_last_index(entries[-1]) + 1, ledger.next_position(read[-1][0]))
        return entries

    def first_entry_at_or_above(self, key: Callable[[bytes], int], target: int) -> bytes | None:
        """The first stored entry whose `key` is >= `target` (a binary search, reading about
        log2(entries) of them: `key` must not decrease along the log), None if there is none."""
        ledger = self._topic.ledger
        position = first_at_or_above(ledger, key, target).position
        return None if position is None else ledger.read_entry(position)

    def policy(self, policy: Policy) -> Any:
        """The value of `policy` in effect for this partition (topic > namespace > broker
        default), cached until a policy changes: for per-request checks."""
        topic = self._topic
        return topic.context.policies.effective(topic.name, policy)

    # -- the compacted view
    def compacted_end(self) -> int | None:
        """The offset after the compaction horizon's last message, None when never compacted."""
        topic = self._topic
        horizon = topic.compaction_service.last_compacted_position()
        if horizon is None:
            return None
        known = self._hints.get(("horizon", self.name))
        if known is not None and known[1] == horizon:
            return known[0]
        ledger = topic.ledger
        if ledger.has_entry(horizon):
            end = entry_last_index(ledger.read_entry(horizon)) + 1
        else:  # the horizon's entry was trimmed: everything stored before the first entry is below it
            first = ledger.first_position
            end = entry_first_index(ledger.read_entry(first)) if first is not None and ledger.has_entry(first) \
                else self.end_offset()
        self._hints[("horizon", self.name)] = (end, horizon)
        return end

    def compacted_start(self) -> int | None:
        """The offset of the compacted view's first message, None when it has none."""
        run = self._topic.compaction_service.read_compacted_entries(_COMPACTED_START, 1)
        return entry_first_index(run[0][1]) if run else None

    def read_compacted(self, offset: int, max_bytes: int, max_entries: int = 500) -> list[bytes] | None:
        """Compacted entries from the one holding `offset` (or the first after it), at most
        `max_bytes` (but at least one), none past the horizon; [] when the compacted view
        has nothing from `offset` on.

        Compacted entries keep their original positions, so the topic's entry for `offset`
        places it; below the topic's first entry (trimmed since) the compacted view is
        scanned, a bounded run per call: None says the scan stopped before finding one (ask
        again: it goes on from there). Each reader's next offset is remembered, so readers
        going on skip both."""
        topic = self._topic
        ledger = topic.ledger
        hints: dict[int, Position] = self._hints.setdefault(("compacted", self.name), {})
        start = hints.pop(offset, None)
        if start is None:
            found = find_by_index(ledger, offset).position if ledger.first_position is not None else None
            start = found if found is not None and ledger.has_entry(found) else _COMPACTED_START
        out: list[bytes] = []
        size = scanned = 0
        while len(out) < max_entries and size < max_bytes and scanned < _COMPACTED_SCAN:
            run = topic.compaction_service.read_compacted_entries(start, min(64, max_entries - len(out)))
            if not run:
                break
            for position, entry in run:
                scanned += 1
                start = Position(position.ledger_id, position.entry_id + 1)
                if entry_last_index(entry) >= offset:
                    out.append(entry)
                    size += len(entry)
                    if size >= max_bytes or len(out) >= max_entries:
                        break
        if len(hints) >= _COMPACTED_READERS:
            hints.clear()
        hints[entry_last_index(out[-1]) + 1 if out else offset] = start
        return None if not out and scanned >= _COMPACTED_SCAN else out

    # -- records deleted (Kafka's DeleteRecords)
    def deleted_before(self) -> int:
        """The offset below which records were deleted (0: none were)."""
        return int(self._topic.ledger.get_property(_DELETED_BEFORE_PROPERTY) or 0)

    def delete_before(self, offset: int) -> None:
        """Records below `offset` are gone for the handler's readers (durably), and every
        durable subscription acknowledges the entries wholly below it, so Pulsar readers skip
        them too and retention can trim them. An entry holding `offset` stays whole."""
        topic = self._topic
        ledger = topic.ledger
        if offset <= self.deleted_before():
            return
        ledger.set_property(_DELETED_BEFORE_PROPERTY, str(offset))
        holding = find_by_index(ledger, offset).position if ledger.first_position is not None else None
        last = ledger.last_confirmed_position if holding is None else ledger.previous_position(holding)
        first = ledger.first_position
        if last is None or first is None or last < first:
            return
        for subscription in topic.subscriptions.values():
            if subscription.durable and subscription.cursor.mark_delete_position < last:
                subscription.expire_up_to(last)

    def commit_offset(self, subscription: str, offset: int, metadata: str | None) -> None:
        """Durably record `offset` (the next to read) as `subscription`'s position, created if need be.

        The cursor moves to the entry holding `offset`, so the subscription's backlog (admin
        stats, retention) counts what the handler's client has not committed; the exact
        offset and its metadata are cursor properties. A handler's commit may move back."""
        topic = self._topic
        found = find_by_index(topic.ledger, offset).position
        position = found if found is not None else topic.next_publish_position()
        subscription_ = topic.subscriptions.get(subscription)
        if subscription_ is None:
            topic.create_subscription_at(subscription, position)
            subscription_ = topic.subscription(subscription)
        else:
            subscription_.cursor.reset(topic.entry_at_or_after(position))
        cursor = subscription_.cursor
        cursor.set_property(_OFFSET_PROPERTY, str(offset))
        cursor.set_property(_OFFSET_METADATA_PROPERTY, metadata or "")
        cursor.flush()

    def committed_offset(self, subscription: str) -> tuple[int, str] | None:
        """(offset, metadata) last committed for `subscription`, None if it never committed."""
        subscription_ = self._topic.subscriptions.get(subscription)
        if subscription_ is None:
            return None
        properties = subscription_.cursor.properties
        if _OFFSET_PROPERTY not in properties:
            return None
        return int(properties[_OFFSET_PROPERTY]), properties.get(_OFFSET_METADATA_PROPERTY, "")

    def property(self, key: str) -> str | None:
        """A property the handler set on this partition's ledger (its own state, e.g. a snapshot)."""
        return self._topic.ledger.get_property(key)

    def set_property(self, key: str, value: str) -> None:
        """Durable at once (a metadata-store write): for state saved now and then, not per append."""
        self._topic.ledger.set_property(key, value)

    def on_append(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after each durable append, whoever published; returns the way to stop."""
        listeners = self._topic.append_listeners
        listeners.append(listener)
        return lambda: listeners.remove(listener) if listener in listeners else None


class HandlerBroker:
    """The broker as a protocol handler sees it."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._read_hints: dict[object, Any] = {}

    @property
    def config(self) -> ServiceConfiguration:
        return self._service.config

    @property
    def authentication(self) -> AuthenticationService:
        """The providers the binary protocol authenticates with (authenticationProviders)."""
        return self._service.authentication

    @property
    def publish_latency(self) -> LatencySummary:
        """The broker-wide pulsar_broker_publish_latency, which a handler's publishes join."""
        return self._service.context.publish_latency

    def authorize(self, operation: Operation, role: str | None, scope: str) -> None:
        """AuthorizationError unless `role` may perform `operation` on `scope` (a topic, or a
        namespace `tenant/ns`), decided by the broker's AuthorizationService as for Pulsar
        clients; nothing when authorization is off. ResourceNotFoundError for a topic of a
        tenant that does not exist."""
        authorization = self._service.authorization
        if not authorization.enabled:  # what check() answers first, without parsing the name per request
            return
        resource = (Resource.of_topic(self._service.parse_topic(scope)) if "://" in scope
                    else Resource.of_namespace(scope))
        authorization.check(operation, role, resource)

    def ssl_context(self) -> ssl.SSLContext:
        """The broker's TLS server context (reloaded with its certificates) when it has a TLS
        port, else one built from the same tls* keys; ConfigError names a bad key."""
        if self._service.ssl_context is not None:
            return self._service.ssl_context
        try:
            return server_context(self.config)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None

    def listening(self, protocol: str, address: str) -> None:
        """The handler of `protocol` accepts clients at `address` (a URL): named in the log when
        a client of that protocol connects to the Pulsar port instead."""
        self._service.protocol_listeners.setdefault(protocol, []).append(address)

    def bound_setting(self, key: str, value: str) -> None:
        """The handler's setting `key` as it took effect (its listeners with the ports bound),
        for the runtime configuration."""
        self._service.bound_settings[key] = value

    def admit_connection(self, ip: str) -> bool:
        """Count a handler's connection from `ip` against brokerMaxConnections and
        brokerMaxConnectionsPerIp, with the Pulsar protocol's; False: refused (close it)."""
        return self._service.connection_controller.admit(ip)

    def release_connection(self, ip: str) -> None:
        self._service.connection_controller.release(ip)

    def reserve_ids(self, name: str, count: int) -> range:
        """`count` ids of the sequence `name` that no start of this broker's data handed out
        before: a counter in the metadata store moved past them before they are used."""
        end = bump_counter(self._service.metadata, _ID_COUNTER_PREFIX + name, count)
        return range(end - count, end)

    @property
    def transactions(self) -> TransactionCoordinator | None:
        """The broker's transaction coordinator (None: transactionCoordinatorEnabled is off),
        on which a handler's transactions are Pulsar transactions."""
        return self._service.transactions

    def state(self, key: str) -> bytes | None:
        """A record a handler keeps in the metadata store (its own state, e.g. a transaction's)."""
        return self._service.metadata.get(_STATE_PREFIX + key)

    def state_keys(self, prefix: str) -> list[str]:
        """The keys of the handler's records under `prefix` (without the store's own prefix)."""
        return [key[len(_STATE_PREFIX):] for key in self._service.metadata.list(_STATE_PREFIX + prefix)]

    def set_state(self, key: str, value: bytes | None) -> None:
        """Durably write (None: delete) a handler's record: one commit of the metadata store."""
        if value is None:
            self._service.metadata.delete(_STATE_PREFIX + key)
        else:
            self._service.metadata.put(_STATE_PREFIX + key, value)

    def log_state(self, key: str, encode: Callable[[], bytes | None]) -> asyncio.Future[None]:
        """Write a handler's record (`encode` gives its bytes when the commit is dispatched,
        None: delete it) in the transaction log's next group commit: off the loop, shared with
        the coordinator's records and ordered with them (a record asked for first is durable
        no later). The future is done once it is durable. Needs transactionCoordinatorEnabled."""
        coordinator = self._service.transactions
        if coordinator is None:
            raise BrokerServiceError(pb.NotAllowedError, "transactionCoordinatorEnabled is off")
        return coordinator.log.write(_STATE_PREFIX + key, encode)

    def namespace_exists(self, namespace: str) -> bool:
        """Whether `tenant/namespace` exists (a user may name one)."""
        return self._service.resources.namespace_exists(namespace)

    def partitions(self, topic: str) -> int | None:
        """The partition count, 0 for an existing non-partitioned topic, None for no topic."""
        name = self._service.parse_topic(topic)
        count = self._service.partitions_of(name)
        if count is not None:
            return count
        return 0 if self._service.topic_exists(name) else None

    def create_topic(self, topic: str, partitions: int) -> None:
        self._service.create_partitioned_topic(self._service.parse_topic(topic), partitions)

    def check_partition_count(self, partitions: int) -> None:
        """InvalidPartitionCountError unless a partitioned topic may have `partitions`."""
        self._service.check_partition_count(partitions)

    def update_partitions(self, topic: str, partitions: int) -> None:
        """Grow a partitioned topic to `partitions` (BrokerServiceError names why not)."""
        self._service.update_partitions(self._service.parse_topic(topic), partitions)

    def policy(self, topic: str, policy: Policy, *, below_topic: bool = False) -> tuple[Any, str]:
        """The value of `policy` in effect for `topic` and where it is set (topic_policies'
        TOPIC, NAMESPACE or BROKER), as the admin API resolves it; `below_topic`: what
        applies when the topic sets none."""
        return self._service.policies.resolved(self._service.parse_topic(topic), policy, below_topic=below_topic)

    def set_policy(self, topic: str, policy: Policy, value: Any | None) -> None:
        """Set (None: remove) `policy` on `topic` itself, where the admin API's topic-level
        writes go; the caller checks the value as the admin API does. It takes effect at once."""
        self._service.policies.set_topic_value(self._service.parse_topic(topic), policy, value)
        if policy == RETENTION:  # loaded topics hand their retention to their ledgers
            self._service.retention_monitor.refresh()

    def check_retention(self, topic: str, retention: Retention) -> None:
        """InvalidRetentionError as the admin API refuses `retention` for `topic`: Pulsar's
        rules, and a retention that its backlog quotas would already exceed."""
        retention.validate()
        quotas = effective_quotas(self.config, self._service.policies, self._service.parse_topic(topic))
        check_against_backlog_quota(retention, quotas[SIZE].limit_size, quotas[AGE].limit_time)

    def check_publish(self, log: PartitionLog) -> None:
        """BrokerServiceError (Pulsar's code and words) unless a publisher without a schema may
        store on `log` now: what a Pulsar producer is held to when it is created (a terminated
        topic, a backlog quota's producer_request_hold or producer_exception, a topic whose
        schema is enforced, a namespace requiring encryption: a handler's records are never
        encrypted as Pulsar's clients encrypt), for a protocol whose publishers are not producers."""
        topic = log._topic
        topic.check_publisher()
        self._service.schemas.add_schema(topic.name, None)
        if encryption_required(topic):
            raise BrokerServiceError(pb.MetadataError, "Messages must be encrypted")

    def delete_topic(self, topic: str) -> None:
        name = self._service.parse_topic(topic)
        if self._service.partitions_of(name) is not None:
            self._service.delete_partitioned_topic(name, force=True)
        else:
            self._service.delete_topic(name, force=True)

    def topics(self, namespace: str) -> list[str]:
        """Persistent topics of a namespace, partitions named by their partitioned topic once."""
        names = {str(TopicName.parse(t).partitioned_topic_name) for t in self._service.topics_of_namespace(namespace)}
        return sorted(names)

    def partition_log(self, topic: str) -> PartitionLog:
        """The log of `topic` (a full name), loaded if need be; never created (a partition of a
        partitioned topic deleted meanwhile is TopicNotFound, not a new topic of its name)."""
        loaded = self._service.get_topic(topic, create=False)
        if not isinstance(loaded, PersistentTopic):
            raise BrokerServiceError(pb.NotAllowedError, f"{topic} is not persistent")
        return PartitionLog(loaded, self._read_hints)


def load_protocol_handlers(service: BrokerService) -> list[ProtocolHandler]:
    """The handlers `messagingProtocols` names, built; a ConfigError names a missing one."""
    config = service.config
    if not config.messagingProtocols:
        return []
    if not any(name.endswith(_INDEX_INTERCEPTOR) for name in config.brokerEntryMetadataInterceptors):
        raise ConfigError(f"messagingProtocols={','.join(config.messagingProtocols)} needs PIP-70 offsets: add "
                          f"{_INDEX_INTERCEPTOR} to brokerEntryMetadataInterceptors")
    available = {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}
    handlers = []
    for name in config.messagingProtocols:
        if name not in available:
            raise ConfigError(f"messagingProtocols: no protocol handler {name!r} (installed: "
                              f"{', '.join(sorted(available)) or 'none'}; handlers register under the "
                              f"{ENTRY_POINT_GROUP!r} entry-point group)")
        handlers.append(available[name].load()(HandlerBroker(service)))
        log.info("protocol handler %s loaded", name)
    return handlers
