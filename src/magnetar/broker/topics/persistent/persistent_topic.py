"""A persistent topic (or one partition of one): its ledger and the subscriptions reading it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.compaction.manager import COMPACTION_CURSOR
from magnetar.broker.deduplication import DEDUPLICATION, MessageDeduplication
from magnetar.broker.delayed_delivery import drop_delayed_index
from magnetar.broker.entry_filters import EntryFilterChain, FilterContext
from magnetar.broker.entry_filters.policy import effective_filter_names
from magnetar.broker.errors import BrokerServiceError, InvalidResourceError, ResourceConflictError
from magnetar.broker.policies.retention import effective_retention
from magnetar.broker.policies.topic_policies import MESSAGE_TTL
from magnetar.broker.topics.abstract_topic import AbstractTopic, GroupPublishCallback
from magnetar.broker.topics.latency import EntryLatencyBuckets
from magnetar.broker.topics.persistent import backlog
from magnetar.broker.topics.persistent.compacted_reads import compacted_last_message_id, compacted_position_by_time
from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription
from magnetar.broker.topics.positions import position_of
from magnetar.broker.topics.replicators import TopicReplicator, has_replicator_prefix
from magnetar.broker.transactions import TRANSACTIONS_PROPERTY
from magnetar.storage import ManagedLedger, MetadataStore, Position, StorageFullError, WriteFailedError
from magnetar.storage.message_finder import find_first_at_or_after, last_visible
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.topics.cnx import TransportCnx
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.context import BrokerContext
    from magnetar.broker.transactions.buffer import TransactionBuffer
    from magnetar.wire.txn import TxnId

log = logging.getLogger(__name__)
Sub = pb.CommandSubscribe
#: Pulsar's managed-ledger property for the topic epoch.
TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"
#: magnetar's managed-ledger property marking a terminated topic (Pulsar keeps it as a
#: managed-ledger state; a property survives restarts the same way).
TERMINATED_PROPERTY = "#magnetar.terminated"


def _batch_size(entry: bytes | None) -> int:
    """num_messages_in_batch of an entry, -1 when it is not a batch (or unreadable)."""
    if entry is None:
        return -1
    try:
        metadata = parse_message_metadata(entry)
    except WireError:
        return -1
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else -1


def _is_marker(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("marker_type")


class PersistentTopic(AbstractTopic):
    def __init__(self, context: BrokerContext, name: TopicName, ledger: ManagedLedger) -> None:
        super().__init__(context, name)
        self.ledger = ledger
        prefix = context.config.replicatorPrefix
        self.subscriptions: dict[str, PersistentSubscription] = {
            sub_name: PersistentSubscription(self, sub_name, cursor, durable=True)
            for sub_name, cursor in ledger.cursors.items()
            if sub_name != COMPACTION_CURSOR and not has_replicator_prefix(sub_name, prefix)
        }
        self.replicators: dict[str, TopicReplicator] = {}
        """Per remote cluster, the replicator reading this topic (magnetar.replication sets them)."""
        last_entry = self._last_entry()
        self._last_batch_size = _batch_size(last_entry)
        self.entry_metadata_state = context.entry_metadata.recover(ledger, last_entry)
        self.durable_index = self.entry_metadata_state.index
        """The PIP-70 index of the last message known durable: stamping numbers messages before
        they are stored, so `entry_metadata_state.index` runs ahead of this while a write is in flight."""
        self._dedup: MessageDeduplication | None = None
        self._dedup_policy_version = -1
        self._filters: EntryFilterChain | None = None
        self._filters_policy_version = -1
        self.compaction_service = context.new_compaction_service(ledger)
        # called after each durable append (a protocol handler's long-polling fetches wait on it)
        self.append_listeners: list[Callable[[], None]] = []
        self.replicated_subscription_listeners: list[Callable[[], None]] = []
        """Told when a subscription becomes replicated (magnetar.replication then takes snapshots)."""
        self.storage_write_latency = EntryLatencyBuckets()
        """Append to durable, per entry (pulsar_storage_write_latency_le_*)."""
        self.transaction_buffer: TransactionBuffer | None = None
        """What dispatch may read of a topic that has held transactions (None: all of it)."""
        self._markers: list[tuple[TxnId, int, asyncio.Future[None], str]] = []
        """Transactions' endings whose markers are appended at the end of this turn of the loop."""
        if ledger.get_property(TRANSACTIONS_PROPERTY) is not None:
            from magnetar.broker.transactions.buffer import TransactionBuffer  # noqa: PLC0415 (transactional topics only)

            self._use_transaction_buffer(TransactionBuffer.load(ledger, *self._buffer_snapshots()))

    # -- publishing
    def publish_many(self, entries: list[bytes], counts: list[int], batch_size: int,
                     callback: GroupPublishCallback) -> None:
        """Append entries (holding `counts` messages each) as one group; `callback` runs on
        the loop once all are durable (or failed)."""
        self._append(entries, counts, batch_size, callback)

    def publish_marker(self, marker: bytes, callback: GroupPublishCallback) -> None:
        """Store a marker the broker writes itself (a replicated subscription's snapshot
        request, response, snapshot or update; a transaction's, see end_transaction): an entry,
        but no message published, so it is not counted in msgInCounter, msgRateIn or
        /metrics' pulsar_in_messages_total, as Pulsar counts only what producers send."""
        self._append([marker], [1], -1, callback, published=False)

    def _append(self, entries: list[bytes], counts: list[int], batch_size: int,
                callback: GroupPublishCallback, *, published: bool = True) -> list[Position]:
        """Stamp and append entries; their positions are handed out at once (not yet durable).
        `published`: messages of producers, counted as the topic's inbound traffic."""
        if published:
            self.inbound.add(sum(counts), sum(map(len, entries)))
        entry_metadata = self.context.entry_metadata
        state = self.entry_metadata_state
        if entry_metadata.interceptors:
            entries = [entry_metadata.stamp(state, entry, count) for entry, count in zip(entries, counts, strict=True)]
        last_index = state.index
        bridge = self.context.bridge
        positions: list[Position] = []
        appended_at = time.monotonic()

        def stored(_last: Position | None, exc: BaseException | None) -> None:
            # Posted to this loop, so _stored runs after the line below has filled `positions`.
            # The write's latency is taken here, on the storage thread, before the hop to the loop.
            bridge.post(self._stored, callback, batch_size, positions, last_index, exc,
                        time.monotonic() - appended_at)

        try:
            positions += self.ledger.append_many(entries, stored)
        except WriteFailedError as exc:
            self.context.failed_writes.write_failed(str(self.name), exc)
            raise
        return positions

    # -- transactions
    def publish_transactional(self, entries: list[bytes], counts: list[int], batch_size: int, txn: TxnId,
                              callback: GroupPublishCallback) -> None:
        """Store messages of an open transaction: nothing from the first of them on is
        dispatched until it ends (the transaction buffer's max read position)."""
        buffer = self.transaction_buffer
        if buffer is None:
            from magnetar.broker.transactions.buffer import TransactionBuffer  # noqa: PLC0415 (transactional topics only)

            self.ledger.set_property(TRANSACTIONS_PROPERTY, "1")  # before the entry: a restart rebuilds the buffer
            buffer = self._use_transaction_buffer(TransactionBuffer(self.ledger, *self._buffer_snapshots()))
        before = self.entry_metadata_state.index
        positions = self._append(entries, counts, batch_size, callback)
        if txn not in buffer.ongoing:  # its first message here: where an abort's range starts
            buffer.appended(txn, positions[0], before + 1 if self.entry_metadata_state.index > before else -1)

    def _buffer_snapshots(self) -> tuple[MetadataStore, int, int]:
        """Where the transaction buffer's snapshots go, and how often (broker.conf's keys)."""
        config = self.context.config
        return (self.context.metadata, config.transactionBufferSnapshotMaxTransactionCount,
                config.transactionBufferSnapshotMinTimeInMillis)

    def _use_transaction_buffer(self, buffer: TransactionBuffer) -> TransactionBuffer:
        """Dispatch reads through it from now on, and so does the built-in compaction (a
        compaction service of a plugin is not told: it sees markers only)."""
        self.transaction_buffer = buffer
        if hasattr(self.compaction_service, "transactions"):
            self.compaction_service.transactions = buffer
        return buffer

    def end_transaction(self, txn: TxnId, action: int, producer: str = "") -> asyncio.Future[None]:
        """END_TXN_ON_PARTITION: store the commit or abort marker (naming the transaction's
        `producer`, see TxnMeta.producer); done once it is durable and dispatch may read past
        the transaction's messages (or must skip them). The markers asked for in one turn of
        the loop (the transactions one log commit decided) are stored as one append: one
        hand-over to the storage thread, one fsync."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.transaction_buffer is None:  # none of its messages came here: nothing to mark
            done.set_result(None)
            return done
        if not self._markers:
            asyncio.get_running_loop().call_soon(self._append_markers)
        self._markers.append((txn, action, done, producer))
        return done

    def _append_markers(self) -> None:
        from magnetar.wire.txn import ABORT, TXN_ABORT_MARKER, TXN_COMMIT_MARKER, marker_entry  # noqa: PLC0415

        ends, self._markers = self._markers, []
        buffer = self.transaction_buffer
        assert buffer is not None  # set before any marker is asked for, never unset

        given: list[Position] = []

        def stored(positions: list[Position] | None, exc: BaseException | None) -> None:
            if exc is not None:
                buffer.unmarked(given)
            for i, (txn, action, done, _producer) in enumerate(ends):
                if exc is not None:
                    done.set_exception(exc)
                    continue
                buffer.ended(txn, action, positions[i] if positions else None,
                             first_index + i if first_index >= 0 else -1, named[i])
                done.set_result(None)

        # only the first marker after its messages names the producer: a restart's repeat of
        # an ending, or a partition it never wrote to, ends no transaction of that producer's
        named = [producer if txn in buffer.ongoing else "" for txn, _action, _done, producer in ends]
        markers = [marker_entry(TXN_ABORT_MARKER if action == ABORT else TXN_COMMIT_MARKER, txn, name)
                   for (txn, action, _done, _producer), name in zip(ends, named, strict=True)]
        before = self.entry_metadata_state.index
        try:
            given += self._append(markers, [1] * len(markers), -1, stored, published=False)
        except Exception as exc:  # a full disk, a failed ledger: each ending fails with it
            stored(None, exc)
            return
        # the markers' PIP-70 indexes, one message each (-1 without them); `stored` runs later
        first_index = before + 1 if self.entry_metadata_state.index > before else -1
        buffer.marking(given)  # `stored` runs on a later turn of the loop

    def _stored(self, callback: GroupPublishCallback, batch_size: int, positions: list[Position], last_index: int,
                exc: BaseException | None, write_seconds: float) -> None:
        if exc is None:
            self.storage_write_latency.observe(write_seconds * 1000, len(positions))
            self._last_batch_size = batch_size
            self.durable_index = max(self.durable_index, last_index)
            for subscription in self.subscriptions.values():
                if subscription.dispatcher is not None and subscription.dispatcher.consumers:
                    subscription.dispatcher.schedule()
            if self.append_listeners:  # protocol handlers only: nothing to copy on a plain broker
                for listener in tuple(self.append_listeners):
                    listener()
        elif isinstance(exc, WriteFailedError):
            self.context.failed_writes.write_failed(str(self.name), exc.__cause__ or exc)
        callback(None if exc is not None else positions, exc)

    def sample_rates(self, now: float) -> None:
        super().sample_rates(now)
        for replicator in self.replicators.values():
            replicator.sample(now)
        self.storage_write_latency.roll()

    def _last_entry(self) -> bytes | None:
        """Read once at load: both the batch size and the PIP-70 state come from it."""
        last = self.ledger.last_confirmed_position
        return None if last is None else self.ledger.read_entry(last)

    def next_publish_position(self) -> Position:
        """The position just past the last durable entry."""
        last = self.ledger.last_confirmed_position
        if last is not None:
            return self.ledger.next_position(last)
        ledgers = self.ledger.ledgers
        return Position(ledgers[-1].ledger_id if ledgers else 0, 0)

    def last_message_id(self, *, read_compacted: bool = False) -> pb.MessageIdData:
        """GetLastMessageId: a compacted reader is answered from the compacted view."""
        if read_compacted:
            compacted = compacted_last_message_id(self)
            if compacted is not None:
                return compacted
        last = self.ledger.last_confirmed_position
        if last is None:
            ledgers = self.ledger.ledgers
            return MessageId(ledgers[-1].ledger_id if ledgers else -1, -1, self.partition).to_proto()
        batch_size = self._last_batch_size
        transactions = self.transaction_buffer
        if transactions is not None or self.replicators:  # not a marker, aborted or held back
            visible = transactions.last_visible(last) if transactions is not None else \
                last_visible(self.ledger, last, _is_marker)
            if visible is None:
                first = self.ledger.first_position or last
                return MessageId(first.ledger_id, first.entry_id - 1, self.partition).to_proto()
            last, metadata = visible
            batch_size = metadata.num_messages_in_batch if metadata is not None and metadata.HasField(
                "num_messages_in_batch") else -1
        batch_index = batch_size - 1 if batch_size > 0 else -1
        return MessageId(last.ledger_id, last.entry_id, self.partition, batch_index).to_proto()

    def find_position_by_time(self, timestamp: int, *, read_compacted: bool = False) -> Position:
        """Where a seek to `timestamp` lands: the first entry at or after it (of the
        compacted view for a compacted reader)."""
        if read_compacted:
            return compacted_position_by_time(self, timestamp)
        found = find_first_at_or_after(self.ledger, timestamp).position
        return found if found is not None else self.next_publish_position()

    def message_ttl_seconds(self) -> int:
        return int(self.context.policies.effective(self.name, MESSAGE_TTL))

    def apply_retention(self) -> None:
        """Hand the topic's current retention policy to its ledger (read by every trim)."""
        self.ledger.retention = effective_retention(self.context.config, self.context.policies, self.name).to_storage()

    # -- producers
    def _check_new_producer(self) -> None:
        super()._check_new_producer()
        if self.context.full_disk.full:  # held until a write fits again (topics.full_disk)
            raise StorageFullError(self.context.full_disk.reason)
        backlog.check_producer_allowed(self)

    @property
    def topic_epoch(self) -> int:
        """How many times an exclusive producer took the topic; kept with the ledger, so a
        fenced producer stays fenced across broker restarts."""
        return int(self.ledger.get_property(TOPIC_EPOCH_PROPERTY) or -1)

    def _set_topic_epoch(self, epoch: int) -> None:
        self.ledger.set_property(TOPIC_EPOCH_PROPERTY, str(epoch))

    # -- consumers
    def subscribe(self, cnx: TransportCnx, cmd: pb.CommandSubscribe) -> Consumer:
        """A SUBSCRIBE asking for replicate_subscription_state makes the subscription a
        replicated one (PIP-33; while enableReplicatedSubscriptions); one without it leaves
        the subscription as it was, as in Pulsar."""
        consumer = super().subscribe(cnx, cmd)
        if cmd.replicate_subscription_state:
            if self.context.config.enableReplicatedSubscriptions:
                consumer.subscription.set_replicated(True)  # type: ignore[attr-defined]
            else:
                log.warning("[%s] %s asks for a replicated subscription, which enableReplicatedSubscriptions=false "
                            "turns off", self.name, cmd.subscription)
        return consumer

    def _check_subscribe(self, cmd: pb.CommandSubscribe) -> None:
        if has_replicator_prefix(cmd.subscription, self.context.config.replicatorPrefix):
            # a replicator's cursor: a consumer on it would take the remote cluster's messages
            raise BrokerServiceError(pb.NotAllowedError, "Subscription with reserved subscription name attempted")
        if cmd.read_compacted and cmd.subType not in (Sub.Exclusive, Sub.Failover):
            raise BrokerServiceError(
                pb.NotAllowedError, "readCompacted only allowed on failover or exclusive subscriptions"
            )
        chain = self.entry_filters
        if chain is not None:  # a selector that could never be judged fails the SUBSCRIBE now
            existing = self.subscriptions.get(cmd.subscription)
            properties = existing.properties if existing is not None else {
                kv.key: kv.value for kv in cmd.subscription_properties}
            chain.check_subscription(FilterContext(str(self.name), cmd.subscription, properties, cmd.consumer_name,
                                                   {kv.key: kv.value for kv in cmd.metadata}))

    def _create_subscription(self, cmd: pb.CommandSubscribe) -> PersistentSubscription:
        if cmd.durable:
            initial = "earliest" if cmd.initialPosition == Sub.Earliest else "latest"
            # written off the loop: the SUBSCRIBE is answered when it is durable (when_stored)
            cursor = self.ledger.open_cursor(cmd.subscription, initial_position=initial, wait=False)
        else:
            start = self._start_position(cmd)
            cursor = self.ledger.open_non_durable_cursor(start)
        subscription = PersistentSubscription(self, cmd.subscription, cursor, durable=cmd.durable)
        if cmd.subscription_properties:
            subscription.set_properties({kv.key: kv.value for kv in cmd.subscription_properties})
        self.subscriptions[cmd.subscription] = subscription
        return subscription

    def _start_position(self, cmd: pb.CommandSubscribe) -> Position:
        """A reader starts AT its start id; the client drops it when exclusive."""
        if not cmd.HasField("start_message_id"):
            first = self.ledger.first_position
            if cmd.initialPosition == Sub.Earliest and first is not None:
                return first
            return self.next_publish_position()
        return self.entry_at_or_after(position_of(cmd.start_message_id))

    def entry_at_or_after(self, position: Position) -> Position:
        """Where a seek or start id naming `position` lands: the first entry of this topic at
        or after it, or just past the last entry. A position in a ledger of another topic, or
        between ledgers, never reaches the cursor as it is."""
        first = self.ledger.first_position
        after_last = self.next_publish_position()
        if first is None or position < first:
            return first if first is not None else after_last
        if position >= after_last:
            return after_last
        return min(self.ledger.position_at_or_after(position), after_last)

    def when_stored(self, subscription: PersistentSubscription,  # type: ignore[override]
                    done: Callable[[BaseException | None], None]) -> None:
        bridge = self.context.bridge
        subscription.cursor.when_created(lambda error: bridge.post(done, error))

    def forget_unstored(self, subscription: PersistentSubscription) -> None:  # type: ignore[override]
        """The ledger forgot its cursor already, and nothing else of it was stored."""
        if not subscription.consumers and self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
            if subscription.dispatcher is not None:
                subscription.dispatcher.close()

    def _drop_subscription(self, subscription: PersistentSubscription) -> None:  # type: ignore[override]
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
        if subscription.dispatcher is not None:
            subscription.dispatcher.close()
        if subscription.durable:
            self.ledger.delete_cursor(subscription.name)
            drop_delayed_index(self.context.metadata, self.ledger.name, subscription.name)
            if subscription.pending_acks is not None:
                subscription.pending_acks.drop()

    # -- admin operations
    def create_subscription_at(self, name: str, position: Position) -> None:
        """A durable subscription whose first unacknowledged entry is `position` (or the
        entry after it, should `position` name none of the topic's)."""
        if name in self.subscriptions:
            raise ResourceConflictError("Subscription already exists for topic")
        cursor = self.ledger.open_cursor(name, initial_position="latest")
        cursor.reset(self.entry_at_or_after(position))
        self.subscriptions[name] = PersistentSubscription(self, name, cursor, durable=True)

    def subscription(self, name: str) -> PersistentSubscription:
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise BrokerServiceError(pb.SubscriptionNotFound, "Subscription not found")
        return subscription

    def delete_subscription(self, name: str, *, force: bool = False) -> None:
        subscription = self.subscription(name)
        if subscription.consumers and not force:
            raise InvalidResourceError("Subscription has active connected consumers")
        for consumer in list(subscription.consumers):
            subscription.remove_consumer(consumer)
            consumer.cnx.tell_consumer_closed(consumer)
        self._drop_subscription(subscription)

    def close(self) -> None:
        """Unload: clients are told to reconnect, timers stop, state is saved, files close."""
        self.disconnect_clients()
        for replicator in list(self.replicators.values()):
            replicator.close()
        self.replicators.clear()
        for subscription in self.subscriptions.values():
            if subscription.dispatcher is not None:
                subscription.dispatcher.close()
        self.save_state()
        self.compaction_service.close()
        self.ledger.close()

    def save_state(self) -> None:
        """What the broker keeps in memory and must find again after a restart; on a full
        disk it is rebuilt from the ledger at the next load instead."""
        try:
            self.context.entry_metadata.save(self.ledger, self.entry_metadata_state)
            if self._dedup is not None:
                self._dedup.snapshot()
        except (StorageFullError, WriteFailedError) as exc:  # rebuilt from the ledger at the next load
            log.warning("[%s] state not saved: %s", self.name, exc)

    def storage_size(self) -> int:
        return self.ledger.total_size_bytes()

    @property
    def terminated(self) -> bool:
        return self.ledger.get_property(TERMINATED_PROPERTY) == "true"

    @property
    def entry_filters(self) -> EntryFilterChain | None:
        """The topic's filter chain, cached until any policy changes: topic > namespace >
        broker (`entryFilterNames`) when `allowOverrideEntryFilters`, else the broker's."""
        policies = self.context.policies
        if policies.version != self._filters_policy_version:
            self._filters_policy_version = policies.version
            names = effective_filter_names(self.context.config, policies, self.name)
            self._filters = self.context.entry_filter_provider.chain(names)
        return self._filters

    @property
    def deduplication(self) -> MessageDeduplication | None:
        """Read on every publish, so the policy lookup is cached until any policy changes;
        turning deduplication on rebuilds its state from the ledger, as Pulsar does."""
        policies = self.context.policies
        if policies.version != self._dedup_policy_version:
            self._dedup_policy_version = policies.version
            enabled = bool(policies.effective(self.name, DEDUPLICATION))
            if enabled and self._dedup is None:
                config = self.context.config
                self._dedup = MessageDeduplication(self.ledger, config.brokerDeduplicationEntriesInterval,
                                                   config.clusterName, config.replicatorPrefix)
            elif not enabled and self._dedup is not None:
                self._dedup.snapshot()
                self._dedup = None
        return self._dedup

    def terminate(self) -> pb.MessageIdData:
        """No message is taken after this one: producers are closed (and refused on their
        return with TopicTerminatedError), consumers learn when they have read everything."""
        if not self.terminated:
            self.ledger.set_property(TERMINATED_PROPERTY, "true")
            for producer in list(self.producers.values()):
                producer.cnx.tell_producer_closed(producer)
            for subscription in self.subscriptions.values():
                if subscription.dispatcher is not None:
                    subscription.dispatcher.schedule()
        return self.last_message_id()

    def stats(self) -> dict[str, object]:
        """Pulsar's TopicStats: counters since the topic was loaded, rates over the last
        stats interval, storage as it is now."""
        return {
            **self.traffic_stats(),
            "storageSize": self.storage_size(),
            "backlogSize": backlog.backlog_bytes(self),
            "publishers": [p.stats() for p in self.producers.values()],
            "subscriptions": {name: sub.stats() for name, sub in self.subscriptions.items()},
            "replication": {remote: replicator.stats() for remote, replicator in sorted(self.replicators.items())},
        }
