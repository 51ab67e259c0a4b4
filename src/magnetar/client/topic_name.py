"""Topic names as clients write them, completed the way Pulsar completes them.

`my-topic` means `persistent://public/default/my-topic`, `tenant/ns/t` means
`persistent://tenant/ns/t`; partition i of a partitioned topic is `<topic>-partition-<i>`.

String-level on purpose, unlike `magnetar.wire.topic_name.TopicName`, which checks every
part: a client completes regular expressions (pattern subscriptions) the same way, and
leaves refusing a bad name to the broker, as the official client does.
"""

from __future__ import annotations

from magnetar.wire.topic_name import PARTITION_SUFFIX


def full_topic_name(topic: str) -> str:
    if "://" in topic:
        return topic
    parts = topic.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{topic}"
    if len(parts) == 3:
        return f"persistent://{topic}"
    raise ValueError(f"invalid topic name {topic!r}")


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITION_SUFFIX}{index}"


def base_topic_name(topic: str) -> str:
    """The partitioned topic a partition belongs to (the name itself when it is not a partition)."""
    head, sep, tail = topic.rpartition(PARTITION_SUFFIX)
    return head if sep and tail.isdigit() else topic


def partition_index(topic: str) -> int:
    _head, sep, tail = topic.rpartition(PARTITION_SUFFIX)
    return int(tail) if sep and tail.isdigit() else -1


def namespace_of(topic: str) -> str:
    """`tenant/namespace` of a full topic name."""
    rest = full_topic_name(topic).split("://", 1)[1]
    tenant, namespace, _ = rest.split("/", 2)
    return f"{tenant}/{namespace}"
