"""Delayed delivery (PIP-26): trackers that hold messages back until deliver_at_time.

`create_tracker` picks the tracker the way Pulsar's
delayedDeliveryTrackerFactoryClassName does, accepting Pulsar's class names and
the short names `InMemory` / `Bucket`. The trackers (tracker.py, bucket.py, and the
bitmap library they use) are imported when a subscription first needs one, not when
the broker starts.

Layer rule: a feature; imports policies, config and errors, never another feature nor
topics, transport, monitors or service.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.storage import ManagedCursor, MetadataStore, StorageError

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.delayed_delivery.tracker import DelayedDeliveryTracker

__all__ = ["create_tracker", "drop_delayed_index", "tracker_kind"]

log = logging.getLogger(__name__)
_PULSAR_PACKAGE = "org.apache.pulsar.broker.delayed."
_KINDS = {"inmemory": "in-memory", "bucket": "bucket"}


def tracker_kind(class_name: str) -> str:
    """'in-memory' or 'bucket' for a factory class name, Pulsar's or short; ValueError otherwise."""
    short = class_name.strip().removeprefix(_PULSAR_PACKAGE)
    short = short.removesuffix("TrackerFactory").removesuffix("DelayedDelivery").lower()
    if short not in _KINDS:
        raise ValueError(f"unknown delayed delivery tracker factory {class_name!r}")
    return _KINDS[short]


def create_tracker(
    config: ServiceConfiguration, store: MetadataStore, cursor: ManagedCursor, ledger_name: str,
    active: bool, tick_ms: int,
) -> DelayedDeliveryTracker | None:
    """The tracker for one subscription, or None when delayed delivery is off (`active`
    and `tick_ms` come from the topic's delayedDelivery policy or the broker's keys).

    A non-durable cursor has nowhere to keep an index, and a bucket tracker that
    cannot open its index must not stop the subscription: both fall back to the
    in-memory tracker, as Pulsar's factory does.
    """
    if not active:
        return None
    from magnetar.broker.delayed_delivery.bucket import BucketDelayedDeliveryTracker  # noqa: PLC0415 (see above)
    from magnetar.broker.delayed_delivery.tracker import InMemoryDelayedDeliveryTracker  # noqa: PLC0415

    tick, strict = tick_ms, config.isDelayedDeliveryDeliverAtTimeStrict
    if tracker_kind(config.delayedDeliveryTrackerFactoryClassName) == "bucket" and cursor.durable:
        try:
            return BucketDelayedDeliveryTracker(
                store, cursor, ledger_name, tick_ms=tick, strict=strict,
                bucket_ms=config.delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds * 1000,
                flush_threshold=config.delayedDeliveryMinIndexCountPerBucket,
            )
        except StorageError:
            log.exception("bucket delayed delivery tracker of %s unavailable; using the in-memory one", cursor.name)
    return InMemoryDelayedDeliveryTracker(tick, strict)


def drop_delayed_index(store: MetadataStore, ledger_name: str, subscription: str) -> None:
    """Remove what a deleted subscription's bucket tracker kept in the metadata store."""
    from magnetar.broker.delayed_delivery.bucket import index_prefix  # noqa: PLC0415 (see the module's docstring)

    store.delete_prefix(index_prefix(ledger_name, subscription))
