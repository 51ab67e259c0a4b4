"""After a restart the dispatcher steps over held and acknowledged positions unread.

Drives a real managed ledger, cursor and bucket tracker in-process, and records
every position the dispatcher reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from topic_context import load_topic

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.delayed_delivery.tracker import wall_clock_ms
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.broker.topics.persistent.shared_dispatcher import MultipleConsumersDispatcher
from magnetar.storage import ManagedLedger, ManagedLedgerFactory, Position
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

NAME = "public/default/persistent/restart"


def entry(sequence: int, deliver_at: int | None) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence, publish_time=1)
    if deliver_at is not None:
        metadata.deliver_at_time = deliver_at
    return build_entry(metadata, b"x")


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[ManagedLedgerFactory]:
    with ManagedLedgerFactory(tmp_path / "data") as f:
        yield f


def loaded(factory: ManagedLedgerFactory, ledger: ManagedLedger) -> PersistentTopic:
    """The topic as a (re)started broker loads it, with its subscription "sub"."""
    config = ServiceConfiguration()
    config.apply({"delayedDeliveryTrackerFactoryClassName": "Bucket", "delayedDeliveryMinIndexCountPerBucket": "10"})
    ledger.open_cursor("sub", initial_position="earliest")
    return load_topic(factory, ledger, config)


def dispatcher(topic: PersistentTopic) -> MultipleConsumersDispatcher:
    return MultipleConsumersDispatcher(topic.subscriptions["sub"])


def test_restart_reads_only_what_is_neither_held_nor_acknowledged(factory, monkeypatch):
    ledger = factory.open(NAME)
    far = wall_clock_ms() + 3_600_000
    positions = [ledger.append_sync(entry(i, far if i % 3 else None)) for i in range(300)]
    first = dispatcher(loaded(factory, ledger))
    immediate = [e.position for e in first._read_new(1000)]
    assert immediate == positions[::3]
    assert len(first.delayed) == 200
    ledger.cursors["sub"].delete(immediate[:-1])  # the last immediate one stays unacknowledged
    first.delayed.flush()

    tail = [ledger.append_sync(entry(1000 + i, None)) for i in range(5)]
    read: list[Position] = []
    original_read_entries = ledger.read_entries

    def recording(start: Position, count: int, max_bytes: int | None = None) -> list[tuple[Position, bytes]]:
        got = original_read_entries(start, count, max_bytes)
        read.extend(position for position, _ in got)
        return got

    restarted = loaded(factory, ledger)  # which reads the last entry, as loading a topic does
    monkeypatch.setattr(ledger, "read_entries", recording)
    monkeypatch.setattr(ledger, "read_entry", lambda position: pytest.fail(f"read {position} one by one"))
    second = dispatcher(restarted)
    assert len(second.delayed) == 200
    again = [e.position for e in second._read_new(1000)]
    assert again == [immediate[-1], *tail]
    assert read == again, "held or acknowledged positions were read"
