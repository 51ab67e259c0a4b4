"""What topics, subscriptions and dispatchers use of the broker around them.

The service builds one BrokerContext and hands it to every topic it loads; a topic sees
nothing else of the service (Pulsar's topics hold the BrokerService; here the topics
layer never imports it). Everything in it is built before the first topic loads, except
the loop bridge, which needs the running event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.broker.topics.latency import LatencySummary

if TYPE_CHECKING:
    from magnetar.broker.compaction import TopicCompactionService
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.entry_filters import EntryFilterProvider
    from magnetar.broker.entry_metadata import EntryMetadataStamper
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.broker.topics.failed_writes import FailedWrites
    from magnetar.broker.topics.full_disk import FullDisk
    from magnetar.broker.topics.loop_bridge import LoopBridge
    from magnetar.storage import ManagedLedger, MetadataStore


@dataclass(slots=True)
class BrokerContext:
    config: ServiceConfiguration
    metadata: MetadataStore
    """Where subscriptions keep what the ledger does not (delayed-delivery indexes)."""
    policies: TopicPolicies
    entry_metadata: EntryMetadataStamper
    entry_filter_provider: EntryFilterProvider
    new_compaction_service: Callable[[ManagedLedger], TopicCompactionService]
    """The compaction service of a topic being loaded (compactionServiceFactoryClassName)."""
    full_disk: FullDisk
    """Holds producers while the data dir's disk is full (topics.full_disk)."""
    failed_writes: FailedWrites
    """Closes and reloads a topic whose ledger failed a write for good (topics.failed_writes)."""
    publish_latency: LatencySummary = field(default_factory=LatencySummary)
    """SEND read to receipt written, broker-wide (pulsar_broker_publish_latency)."""
    bridge: LoopBridge = field(init=False)
    """Brings storage completions to the loop; set when the broker starts, before any topic loads."""
