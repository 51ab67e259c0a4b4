"""Per replicated topic: snapshots made, answered and kept, UPDATE markers sent and
applied (Pulsar's ReplicatedSubscriptionsController; see the package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.compaction.manager import COMPACTION_CURSOR
from magnetar.broker.topics.replicators import has_replicator_prefix
from magnetar.replication.subscriptions.snapshot_builder import SnapshotBuilder, position_pair
from magnetar.replication.subscriptions.snapshot_cache import CachedSnapshot, SnapshotCache
from magnetar.storage import Position, StorageClosedError, StorageFullError, WriteFailedError
from magnetar.wire import markers
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

log = logging.getLogger(__name__)
_NEW_DATA_SCAN = 64
"""Entries a tick reads past the last snapshot's start, looking for one that is not a marker."""


class SubscriptionsController:
    def __init__(self, topic: PersistentTopic, connected: Callable[[], bool],
                 on_closed: Callable[[SubscriptionsController], None]) -> None:
        """`connected`: whether every replicator of the topic has its remote producer now."""
        config = topic.context.config
        self.topic = topic
        self.local = config.clusterName
        self._replicator_prefix = config.replicatorPrefix
        self._interval = config.replicatedSubscriptionsSnapshotFrequencyMillis / 1000
        self._timeout = float(config.replicatedSubscriptionsSnapshotTimeoutSeconds)
        self._max_cached = config.replicatedSubscriptionsSnapshotMaxCachedPerSubscription
        self._connected = connected
        self._on_closed = on_closed
        self._pending: dict[str, tuple[SnapshotBuilder, Position]] = {}
        """Snapshots under way, with the topic's last position when each started."""
        self._covered: Position | None = None
        """The last position when the newest completed snapshot started: data after it is new."""
        self._caches: dict[str, SnapshotCache] = {}
        self.closed = False
        self._task: asyncio.Future[None] | None = None
        topic.replicated_subscription_listeners.append(self.wake)
        self.wake()

    def wake(self) -> None:
        """Tick while the topic has a replicated subscription: a broker with thousands of
        replicated topics and few replicated subscriptions wakes for those only."""
        if self.closed or (self._task is not None and not self._task.done()) or not self._replicated():
            return
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while not self.closed:
            await asyncio.sleep(self._interval)
            if self.topic.ledger.closed:
                break
            try:
                self.tick()
            except StorageClosedError:
                break
            except Exception:
                log.exception("[%s] replicated subscriptions: tick failed", self.topic.name)
            if not self._replicated():
                return  # idle until a subscription becomes replicated again (wake)
        self.close()

    def tick(self) -> None:
        """Send the updates mark-delete positions earned, drop snapshots that timed out,
        and start a snapshot when one is due (one at a time)."""
        replicated = self._replicated()
        for name in set(self._caches) - {sub.name for sub in replicated}:
            del self._caches[name]
        if not replicated:
            self._pending.clear()
            return
        self._advance(replicated)
        self._pending = {sid: pending for sid, pending in self._pending.items()
                         if pending[0].completing or not pending[0].timed_out}
        if not self._pending and self.topic.replicators and self._connected() and self._new_data():
            self._start_snapshot()

    def _replicated(self) -> list[PersistentSubscription]:
        return [sub for sub in self.topic.subscriptions.values() if sub.replicated]

    def _new_data(self) -> bool:
        """Whether a message that is not a marker was stored since the last snapshot started
        (markers alone, other clusters' included, need no new snapshot)."""
        ledger = self.topic.ledger
        last, first = ledger.last_confirmed_position, ledger.first_position
        start = first if self._covered is None else ledger.next_position(self._covered)
        if last is None or first is None or start is None or start > last:
            return False
        start = max(start, first)  # retention may have trimmed what the last snapshot saw
        entries = ledger.read_entries(start, _NEW_DATA_SCAN, 1 << 20)
        for _, data in entries:
            try:
                if not parse_message_metadata(data).HasField("marker_type"):
                    return True
            except WireError:
                return True
        return len(entries) == _NEW_DATA_SCAN

    def _start_snapshot(self) -> None:
        last = self.topic.ledger.last_confirmed_position
        assert last is not None  # _new_data found an entry
        builder = SnapshotBuilder(set(self.topic.replicators), self._timeout)
        self._pending[builder.snapshot_id] = (builder, last)
        self._write(markers.request_entry(builder.snapshot_id, self.local))

    # -- markers read by the replicator to the cluster that sent them
    def received(self, position: Position, metadata: pb.MessageMetadata, payload: bytes) -> None:
        """A marker another cluster's replicator stored here (its `replicated_from` is the
        cluster the reading replicator replicates to)."""
        try:
            self._act_on(position, metadata, payload)
        finally:  # after: a subscription the marker made does not hold it either
            self._hide(position)

    def _act_on(self, position: Position, metadata: pb.MessageMetadata, payload: bytes) -> None:
        if self.closed or metadata.marker_type not in markers.REPLICATED_SUBSCRIPTION_MARKERS:
            return
        try:
            marker = markers.parse_marker(metadata.marker_type, payload)
        except WireError as exc:
            log.warning("[%s] marker at %s from %s ignored: %s", self.topic.name, position,
                        metadata.replicated_from, exc)
            return
        source = metadata.replicated_from
        try:
            if isinstance(marker, markers.Request):
                self._answer(marker, source)
            elif isinstance(marker, markers.Response):
                self._response(position, marker, source)
            elif isinstance(marker, markers.Update):
                self._apply_update(marker)
        except Exception:  # the replicator reading it must go on replicating
            log.exception("[%s] marker at %s from %s failed", self.topic.name, position, source)

    def _answer(self, request: markers.Request, source: str) -> None:
        last = self.topic.ledger.last_confirmed_position
        if request.source_cluster != source or source not in self.topic.replicators or last is None:
            return  # only the cluster that asked gets an answer, and only one replicated to
        self._write(markers.response_entry(request.snapshot_id, source, self.local, *position_pair(last)))

    def _response(self, position: Position, response: markers.Response, source: str) -> None:
        pending = self._pending.get(response.snapshot_id)
        if pending is None or response.cluster.cluster != source:
            return  # late (timed out), or one cluster answering for another
        builder, started_at = pending
        message_id = response.cluster.message_id
        outcome = builder.received(source, (message_id.ledger_id, message_id.entry_id))
        if outcome == "again":
            self._write(markers.request_entry(builder.snapshot_id, self.local))
        elif outcome == "done":
            snapshot = CachedSnapshot(position, dict(builder.responses))
            self._write(markers.snapshot_entry(builder.snapshot_id, self.local, position_pair(position),
                                               snapshot.clusters),
                        lambda stored: self._completed(builder.snapshot_id, started_at, snapshot, stored))

    def _completed(self, snapshot_id: str, started_at: Position, snapshot: CachedSnapshot, stored: bool) -> None:
        self._pending.pop(snapshot_id, None)
        if not stored:
            return
        self._covered = started_at
        replicated = self._replicated()
        for sub in replicated:
            self._cache(sub.name).add(snapshot)
        self._advance(replicated)

    def _cache(self, name: str) -> SnapshotCache:
        cache = self._caches.get(name)
        if cache is None:
            cache = self._caches[name] = SnapshotCache(self._max_cached, self.topic.ledger.entries_between)
        return cache

    def _advance(self, subscriptions: list[PersistentSubscription]) -> None:
        """An UPDATE for each subscription whose mark-delete position passed a snapshot."""
        for sub in subscriptions:
            snapshot = self._cache(sub.name).advance(sub.cursor.mark_delete_position)
            if snapshot is not None:
                self._write(markers.update_entry(sub.name, snapshot.clusters))

    def _apply_update(self, update: markers.Update) -> None:
        """Move the named subscription here forward to the position the update names for
        this cluster (made there, if it is missing, as Pulsar makes it)."""
        mine = markers.positions_of(update.clusters).get(self.local)
        name = update.subscription_name
        reserved = name == COMPACTION_CURSOR or has_replicator_prefix(name, self._replicator_prefix)
        if mine is None or not name or reserved:
            return
        topic = self.topic
        target = Position(*mine)
        if not topic.ledger.has_entry(target):
            log.info("[%s] update of %s to %s ignored: not an entry here", topic.name, name, target)
            return
        subscription = topic.subscriptions.get(name)
        if subscription is None:
            start = topic.ledger.next_position(target)
            topic.create_subscription_at(name, start)
            subscription = topic.subscriptions[name]
            subscription.set_replicated(True)
            self._hide_markers_from(subscription, start)
            log.info("[%s] replicated subscription %s made at %s by an update", topic.name, name, target)
        elif subscription.durable and target > subscription.cursor.mark_delete_position:
            subscription.expire_up_to(target)

    # -- writing
    def _write(self, entry: bytes, then: Callable[[bool], None] | None = None) -> None:
        """Store a marker and acknowledge it on every subscription; `then` is told whether
        it was stored."""
        topic = self.topic

        def stored(positions: list[Position] | None, exc: BaseException | None) -> None:
            if exc is not None:
                log.warning("[%s] marker not stored: %s", topic.name, exc)
            elif positions:
                self._hide(positions[0])
            if then is not None:
                then(exc is None and bool(positions))

        if topic.terminated or self.closed:
            stored(None, None)
            return
        try:
            topic.publish_marker(entry, stored)
        except (StorageFullError, WriteFailedError, StorageClosedError) as exc:
            stored(None, exc)

    def _hide_markers_from(self, subscription: PersistentSubscription, start: Position) -> None:
        """A subscription made now missed the acknowledgements of the markers stored since
        `start` (the snapshot's own answer among them): they are no backlog of its either."""
        ledger = self.topic.ledger
        last = ledger.last_confirmed_position
        if last is None or start > last:
            return
        for position, data in ledger.read_entries(start, _NEW_DATA_SCAN, 1 << 20):
            with contextlib.suppress(WireError):
                if parse_message_metadata(data).HasField("marker_type"):
                    subscription.acknowledge_filtered(position)

    def _hide(self, position: Position) -> None:
        """No subscription holds a marker as backlog (the dispatcher would skip it anyway)."""
        for subscription in list(self.topic.subscriptions.values()):
            if not subscription.cursor.is_acknowledged(position):
                subscription.acknowledge_filtered(position)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.wake in self.topic.replicated_subscription_listeners:
            self.topic.replicated_subscription_listeners.remove(self.wake)
        if self._task is not None:
            self._task.cancel()
        self._pending.clear()
        self._on_closed(self)
