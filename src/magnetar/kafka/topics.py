"""Kafka topic names on Pulsar topics, as Kafka-on-Pulsar maps them.

Kafka topic `orders` is `persistent://<namespace>/orders`; Kafka partition i is the
partitioned topic's partition i, and a non-partitioned Pulsar topic is one Kafka
partition, 0. A Kafka client names topics without a domain or namespace, so only its
connection's namespace is visible to it: `kafkaTenant/kafkaNamespace`, or the one its SASL
user name chose (see sasl). Each namespace is a view of its own over the same broker.
"""

from __future__ import annotations

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.protocol_handlers import HandlerBroker, PartitionLog
from magnetar.wire.proto import pulsar_api_pb2 as pb


class UnknownPartition(LookupError):
    """A topic or partition that does not exist (Kafka's UNKNOWN_TOPIC_OR_PARTITION)."""


class KafkaTopics:
    """Name mapping and the loaded partition logs of one namespace."""

    def __init__(self, broker: HandlerBroker, namespace: str | None = None,
                 names: dict[tuple[str, int], str] | None = None) -> None:
        self._broker = broker
        config = broker.config
        self.namespace = namespace or f"{config.kafkaTenant}/{config.kafkaNamespace}"
        # Kafka partition (as its Pulsar topic name and index) -> the Pulsar topic it is: a partition
        # count is a metadata-store read, and partitions only grow; shared by every namespace's view
        self._names = {} if names is None else names

    def in_namespace(self, namespace: str) -> KafkaTopics:
        """The view of `namespace`, sharing this one's broker and name cache."""
        return self if namespace == self.namespace else KafkaTopics(self._broker, namespace, self._names)

    @property
    def broker(self) -> HandlerBroker:
        return self._broker

    def pulsar_name(self, topic: str) -> str:
        return f"persistent://{self.namespace}/{topic}"

    def partitions(self, topic: str) -> int | None:
        """Kafka's partition count of `topic` (None: no such topic)."""
        try:
            count = self._broker.partitions(self.pulsar_name(topic))
        except BrokerServiceError:
            return None
        return None if count is None else max(count, 1)

    def create(self, topic: str, partitions: int) -> None:
        self._broker.create_topic(self.pulsar_name(topic), partitions)

    def delete(self, topic: str) -> None:
        """The names remembered of its partitions go when they are next asked for (the broker
        no longer finds them), wherever the topic was deleted."""
        self._broker.delete_topic(self.pulsar_name(topic))

    def names(self) -> list[str]:
        prefix = f"persistent://{self.namespace}/"
        return [name[len(prefix):] for name in self._broker.topics(self.namespace) if name.startswith(prefix)]

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The log of a Kafka partition; UnknownPartition when the topic or partition is missing.
        A remembered name the broker no longer finds (the topic was deleted, and may have been
        made again otherwise) is looked up afresh."""
        key = (self.pulsar_name(topic), partition)
        name = self._names.get(key)
        if name is not None:
            try:
                return self._broker.partition_log(name)
            except BrokerServiceError as exc:
                if exc.code != pb.TopicNotFound:
                    raise
                del self._names[key]
        name = self._partition_name(topic, partition)
        try:
            found = self._broker.partition_log(name)
        except BrokerServiceError as exc:
            if exc.code == pb.TopicNotFound:
                raise UnknownPartition(f"{topic}-{partition}") from None
            raise
        self._names[key] = name
        return found

    def _partition_name(self, topic: str, partition: int) -> str:
        count = self._broker.partitions(self.pulsar_name(topic)) if _valid(topic) else None
        if count is None or not 0 <= partition < max(count, 1):
            raise UnknownPartition(f"{topic}-{partition}")
        return self.pulsar_name(topic) if count == 0 else f"{self.pulsar_name(topic)}-partition-{partition}"


def _valid(topic: str) -> bool:
    return bool(topic) and "/" not in topic and topic not in (".", "..")
