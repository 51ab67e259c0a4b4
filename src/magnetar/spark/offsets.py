"""Offsets: the broker's continuous PIP-70 index, per topic partition.

An offset names the next message to read by its index, not by a ledger position: an index
survives ledger rollovers and broker restarts unchanged, a person can read it, and a batch
entry's messages each have their own (`index of the entry's last message - n + i + 1`), so
a micro-batch may end in the middle of a batch and the next one resumes exactly there.

A stream's offset is JSON `{"persistent://tenant/ns/topic": {"<partition>": next_index}}`,
partition `-1` for a non-partitioned topic, the shape Spark's Kafka source uses.
`EARLIEST_INDEX` (-2) marks a partition that had no entry yet: it is read from its start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.wire.message_id import MessageId

EARLIEST_INDEX = -2
LATEST_INDEX = -1


@dataclass(frozen=True, slots=True)
class TopicPartition:
    """A topic partition as rows name it: the topic's full name and its partition (-1: none)."""

    topic: str
    partition: int

    @property
    def storage_topic(self) -> str:
        """The full name of the partition's own topic (`...-partition-N`)."""
        return self.topic if self.partition < 0 else f"{self.topic}-partition-{self.partition}"


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """`earliest`, `latest`, or an index per topic partition (-2 earliest, -1 latest), or
    (pulsar-spark's form) a message id per topic partition, found in the topic when planning."""

    kind: str = "indexes"
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    message_ids: dict[tuple[str, int], MessageId] = field(default_factory=dict)

    def index_for(self, tp: TopicPartition) -> int:
        """The requested index of `tp`; partitions the JSON leaves out start at the earliest.
        A partition given by message id has none until the id is looked up (`message_id`)."""
        if self.kind == "earliest":
            return EARLIEST_INDEX
        if self.kind == "latest":
            return LATEST_INDEX
        return self.per_partition.get((tp.topic, tp.partition), EARLIEST_INDEX)

    def message_id(self, tp: TopicPartition) -> MessageId | None:
        return self.message_ids.get((tp.topic, tp.partition))


@dataclass(frozen=True, slots=True)
class TimeSpec:
    """startingTime/endingTime: one time for every partition, or (pulsar-spark's JSON form)
    one per topic or topic partition."""

    every: int | None = None
    per_topic: tuple[tuple[str, int, int], ...] = ()
    """(topic, partition or -1 for all of the topic's, time in ms)."""

    def time_for(self, tp: TopicPartition) -> int | None:
        for topic, partition, when in self.per_topic:
            if topic == tp.topic and partition in (-1, tp.partition):
                return when
        return self.every

    @property
    def given(self) -> bool:
        return self.every is not None or bool(self.per_topic)


EARLIEST = OffsetSpec("earliest")
LATEST = OffsetSpec("latest")

StreamOffset = dict[str, dict[str, int]]


def to_stream_offset(indexes: dict[TopicPartition, int]) -> StreamOffset:
    out: StreamOffset = {}
    for tp in sorted(indexes, key=lambda t: (t.topic, t.partition)):
        out.setdefault(tp.topic, {})[str(tp.partition)] = indexes[tp]
    return out


def from_stream_offset(offset: StreamOffset) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(partition)): int(index)
        for topic, partitions in offset.items()
        for partition, index in partitions.items()
    }


def cap_by_messages(
    start: dict[TopicPartition, int], latest: dict[TopicPartition, int], budget: int
) -> dict[TopicPartition, int]:
    """End offsets admitting at most `budget` messages, shared in proportion to what each has.

    Every partition with data gets at least one message while the budget lasts, so a small
    cap over many partitions still makes progress everywhere.
    """
    available = {tp: max(0, latest[tp] - start[tp]) for tp in latest if start.get(tp, EARLIEST_INDEX) >= 0}
    total = sum(available.values())
    if total <= budget:
        return dict(latest)
    end = dict(latest)
    granted = {tp: (n * budget) // total for tp, n in available.items()}
    left = budget - sum(granted.values())
    for tp, n in sorted(available.items(), key=lambda item: -item[1]):
        if left <= 0:
            break
        if n > granted[tp]:
            granted[tp] += 1
            left -= 1
    for tp, n in granted.items():
        end[tp] = start[tp] + n
    return end
