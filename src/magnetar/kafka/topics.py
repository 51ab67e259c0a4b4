"""Kafka topic names on Pulsar topics, as Kafka-on-Pulsar maps them.

Kafka topic `orders` is `persistent://<kafkaTenant>/<kafkaNamespace>/orders`; Kafka
partition i is the partitioned topic's partition i, and a non-partitioned Pulsar topic is
one Kafka partition, 0. A Kafka client names topics without a domain or namespace, so only
the configured namespace is visible to it.
"""

from __future__ import annotations

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.protocol_handlers import HandlerBroker, PartitionLog
from magnetar.wire.proto import pulsar_api_pb2 as pb


class UnknownPartition(LookupError):
    """A topic or partition that does not exist (Kafka's UNKNOWN_TOPIC_OR_PARTITION)."""


class KafkaTopics:
    """Name mapping and the loaded partition logs of one handler."""

    def __init__(self, broker: HandlerBroker) -> None:
        self._broker = broker
        config = broker.config
        self.namespace = f"{config.kafkaTenant}/{config.kafkaNamespace}"
        # Kafka partition -> Pulsar topic: a partition count is a metadata-store read, and partitions only grow
        self._names: dict[tuple[str, int], str] = {}

    @property
    def broker(self) -> HandlerBroker:
        return self._broker

    def pulsar_name(self, topic: str) -> str:
        return f"persistent://{self.namespace}/{topic}"

    def partitions(self, topic: str, *, create: bool = False) -> int | None:
        """Kafka's partition count of `topic` (None: no such topic), created if asked and allowed."""
        try:
            count = self._broker.partitions(self.pulsar_name(topic))
        except BrokerServiceError:
            return None
        if count is None and create and self._broker.config.allowAutoTopicCreation:
            self.create(topic, self._broker.config.defaultNumPartitions)
            count = self._broker.partitions(self.pulsar_name(topic))
        return None if count is None else max(count, 1)

    def create(self, topic: str, partitions: int) -> None:
        self._broker.create_topic(self.pulsar_name(topic), partitions)

    def delete(self, topic: str) -> None:
        self._names = {key: name for key, name in self._names.items() if key[0] != topic}
        self._broker.delete_topic(self.pulsar_name(topic))

    def names(self) -> list[str]:
        prefix = f"persistent://{self.namespace}/"
        return [name[len(prefix):] for name in self._broker.topics(self.namespace) if name.startswith(prefix)]

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The log of a Kafka partition; UnknownPartition when the topic or partition is missing."""
        key = (topic, partition)
        name = self._names.get(key)
        if name is None:
            count = self._broker.partitions(self.pulsar_name(topic)) if _valid(topic) else None
            if count is None or not 0 <= partition < max(count, 1):
                raise UnknownPartition(f"{topic}-{partition}")
            name = self.pulsar_name(topic) if count == 0 else f"{self.pulsar_name(topic)}-partition-{partition}"
            self._names[key] = name
        try:
            return self._broker.partition_log(name)
        except BrokerServiceError as exc:
            if exc.code == pb.TopicNotFound:
                self._names.pop(key, None)
                raise UnknownPartition(f"{topic}-{partition}") from None
            raise


def _valid(topic: str) -> bool:
    return bool(topic) and "/" not in topic and topic not in (".", "..")
