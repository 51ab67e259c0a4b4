"""Broker entry metadata (PIP-70): the prefix the broker stamps on stored entries.

Interceptors are named as in a Pulsar broker.conf (`brokerEntryMetadataInterceptors`):
Pulsar's own class names, their short names, or plugins registered under the
`magnetar.broker_interceptors` entry-point group. Each one fills its fields of
one BrokerEntryMetadata per entry; with none configured, entries are stored
exactly as producers sent them.

The per-partition state (last timestamp, index counter) is recovered when a
topic loads from the prefix of its last entry, so the index has no gap and
the timestamp never goes backwards across ledger rollovers and restarts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from magnetar.broker.config import ConfigError
from magnetar.plugins import installed_entry_points
from magnetar.storage import ManagedLedger
from magnetar.wire.entry import add_broker_entry_metadata, peek_broker_entry_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

ENTRY_POINT_GROUP = "magnetar.broker_interceptors"
_PULSAR_PACKAGE = "org.apache.pulsar.common.intercept."
#: Saved on clean close, for a topic whose last entries carry no prefix.
INDEX_PROPERTY = "index"


@dataclass(slots=True)
class PartitionEntryMetadataState:
    """What the interceptors remember per topic partition."""

    last_timestamp: int = 0
    index: int = -1


class BrokerEntryMetadataInterceptor(Protocol):
    def intercept(self, metadata: pb.BrokerEntryMetadata, state: PartitionEntryMetadataState,
                  num_messages: int) -> None: ...


class AppendBrokerTimestampMetadataInterceptor:
    """broker_timestamp: the broker's clock, held monotonic per partition."""

    def intercept(self, metadata: pb.BrokerEntryMetadata, state: PartitionEntryMetadataState,
                  num_messages: int) -> None:
        now = max(time.time_ns() // 1_000_000, state.last_timestamp)
        state.last_timestamp = now
        metadata.broker_timestamp = now


class AppendIndexMetadataInterceptor:
    """index: a per-partition message counter; the entry gets its last message's index."""

    def intercept(self, metadata: pb.BrokerEntryMetadata, state: PartitionEntryMetadataState,
                  num_messages: int) -> None:
        state.index += num_messages
        metadata.index = state.index


_BUILTIN: dict[str, type[BrokerEntryMetadataInterceptor]] = {
    "AppendBrokerTimestampMetadataInterceptor": AppendBrokerTimestampMetadataInterceptor,
    "AppendIndexMetadataInterceptor": AppendIndexMetadataInterceptor,
}


def load_interceptor(name: str) -> BrokerEntryMetadataInterceptor:
    short = name.removeprefix(_PULSAR_PACKAGE)
    if short in _BUILTIN:
        return _BUILTIN[short]()
    for plugin in installed_entry_points(ENTRY_POINT_GROUP):
        if plugin.name == name:
            return plugin.load()()  # type: ignore[no-any-return]
    known = ", ".join(sorted(_BUILTIN))
    raise ConfigError(
        f"brokerEntryMetadataInterceptors: unknown interceptor {name!r} (built in: {known}; "
        f"plugins register under the {ENTRY_POINT_GROUP!r} entry-point group)"
    )


class EntryMetadataStamper:
    """Runs the configured interceptors over each entry before it is stored."""

    def __init__(self, interceptor_names: list[str], index_base: int = 0) -> None:
        self.interceptors = [load_interceptor(name) for name in interceptor_names]
        self.index_base = index_base

    @property
    def enabled(self) -> bool:
        return bool(self.interceptors)

    def recover(self, ledger: ManagedLedger, last_entry: bytes | None) -> PartitionEntryMetadataState:
        """State for a partition from its last entry's prefix (or the saved counter).

        Nothing is read when no interceptor is configured: the state is then unused.
        """
        state = PartitionEntryMetadataState(index=self.index_base - 1)
        if not self.interceptors:
            return state
        saved = ledger.get_property(INDEX_PROPERTY)
        if saved is not None:
            state.index = max(state.index, int(saved))
        if last_entry is not None:
            try:
                bem = peek_broker_entry_metadata(last_entry)
            except WireError:
                bem = None
            if bem is not None:
                if bem.HasField("index"):
                    state.index = max(state.index, bem.index)
                state.last_timestamp = bem.broker_timestamp
        return state

    def save(self, ledger: ManagedLedger, state: PartitionEntryMetadataState) -> None:
        if self.interceptors:
            ledger.set_property(INDEX_PROPERTY, str(state.index))

    def stamp(self, state: PartitionEntryMetadataState, entry: bytes, num_messages: int) -> bytes:
        if not self.interceptors or num_messages <= 0:
            return entry
        metadata = pb.BrokerEntryMetadata()
        for interceptor in self.interceptors:
            interceptor.intercept(metadata, state, num_messages)
        return add_broker_entry_metadata(entry, metadata)
