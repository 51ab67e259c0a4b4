"""Real topics in-process, without a broker: for tests that drive a subscription or a
dispatcher directly. The context holds the parts a BrokerService builds for its topics,
over a ledger factory's metadata store; no event loop runs, so there is no loop bridge
(nothing here publishes)."""

from __future__ import annotations

from magnetar.broker.compaction import BuiltinCompactionService, CompactionOptions
from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.entry_filters import EntryFilterProvider
from magnetar.broker.entry_metadata import EntryMetadataStamper
from magnetar.broker.policies.resources import NamespaceResources
from magnetar.broker.policies.topic_policies import TopicPolicies
from magnetar.broker.topics.context import BrokerContext
from magnetar.broker.topics.failed_writes import FailedWrites
from magnetar.broker.topics.full_disk import FullDisk
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.storage import ManagedLedger, ManagedLedgerFactory
from magnetar.wire.topic_name import TopicName


def broker_context(factory: ManagedLedgerFactory, config: ServiceConfiguration) -> BrokerContext:
    store = factory.metadata_store
    options = CompactionOptions(config.topicCompactionRetainNullKey, config.maxMessageSize)
    return BrokerContext(config, store, TopicPolicies(store, NamespaceResources(store), config),
                         EntryMetadataStamper(config.brokerEntryMetadataInterceptors),
                         EntryFilterProvider(config.entryFilterNames),
                         lambda ledger: BuiltinCompactionService(ledger, factory, options),
                         FullDisk(factory.disk_space), FailedWrites(_no_unload))


def _no_unload(topic: str) -> None:
    raise AssertionError(f"{topic}: a write failed in a test without a broker")


def load_topic(factory: ManagedLedgerFactory, ledger: ManagedLedger, config: ServiceConfiguration) -> PersistentTopic:
    """The topic of `ledger` as the broker loads it: with a subscription per cursor."""
    return PersistentTopic(broker_context(factory, config), TopicName.from_storage_name(ledger.name), ledger)
