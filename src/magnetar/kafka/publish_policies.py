"""The policies a Kafka producer meets: a Pulsar producer's, asked of the broker on every
produce request (a Kafka producer has no session the broker could refuse once), each with
Kafka's error for it.

- a terminated topic (TopicTerminatedError): POLICY_VIOLATION, the batch fails;
- a backlog quota over its limit with `producer_exception`
  (ProducerBlockedQuotaExceededException): POLICY_VIOLATION, the batch fails;
- the same with `producer_request_hold` (ProducerBlockedQuotaExceededError):
  NOT_ENOUGH_REPLICAS, nothing stored: the error every Kafka producer (the Java client,
  librdkafka, kafka-python) retries until `delivery.timeout.ms`, as Pulsar's client holds
  its sends until its send timeout (librdkafka fails a batch at once on
  THROTTLING_QUOTA_EXCEEDED, which Kafka's brokers never send to producers);
- a topic with a schema and `schemaValidationEnforced` (IncompatibleSchema): INVALID_RECORD;
- a namespace requiring encryption (MetadataError): POLICY_VIOLATION.

A topic over its publish rate (broker.topics.publish_rate) refuses nothing: the produce is
answered as usual with `throttle_time_ms`, and the connection is muted for that time
(connection), as Kafka's quotas slow a producer.

The size of each batch is held to the topic's maxMessageSize policy, else the broker's
(MESSAGE_TOO_LARGE), with the batches' own checks (produce).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.protocol_handlers import HandlerBroker, PartitionLog
from magnetar.broker.topics.topic_limits import MAX_MESSAGE_SIZE
from magnetar.kafka.errors import Answer, kafka_error
from magnetar.storage import StorageFullError


def refusal(broker: HandlerBroker, log: PartitionLog) -> Answer | None:
    """Kafka's error and the broker's reason when `log` takes nothing from a producer now
    (kafka.errors; a refusal Kafka has no name for is POLICY_VIOLATION)."""
    try:
        broker.check_publish(log)
    # StorageFullError: producers are held while the disk is full, a log that cannot write
    except (BrokerServiceError, StorageFullError) as exc:
        return kafka_error(exc, otherwise=ErrorCode.policy_violation)
    return None


def max_batch_size(log: PartitionLog) -> int:
    """The largest batch `log` takes: its topic's maxMessageSize policy, else the broker's."""
    return int(log.policy(MAX_MESSAGE_SIZE))
