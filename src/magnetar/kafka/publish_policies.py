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

The size of each batch is held to the topic's maxMessageSize policy, else the broker's
(MESSAGE_TOO_LARGE), with the batches' own checks (produce).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.protocol_handlers import HandlerBroker, PartitionLog
from magnetar.broker.topics.topic_limits import MAX_MESSAGE_SIZE
from magnetar.storage import StorageFullError
from magnetar.wire.proto import pulsar_api_pb2 as pb

_ERRORS = {
    pb.TopicTerminatedError: ErrorCode.policy_violation,
    pb.ProducerBlockedQuotaExceededException: ErrorCode.policy_violation,
    pb.ProducerBlockedQuotaExceededError: ErrorCode.not_enough_replicas,
    pb.IncompatibleSchema: ErrorCode.invalid_record,
    pb.MetadataError: ErrorCode.policy_violation,
}


def refusal(broker: HandlerBroker, log: PartitionLog) -> tuple[ErrorCode, str] | None:
    """Kafka's error and the broker's reason when `log` takes nothing from a producer now."""
    try:
        broker.check_publish(log)
    except BrokerServiceError as exc:
        return _ERRORS.get(exc.code, ErrorCode.policy_violation), exc.message
    except StorageFullError as exc:  # producers are held while the disk is full: a log that cannot write
        return ErrorCode.kafka_storage_error, str(exc)
    return None


def max_batch_size(log: PartitionLog) -> int:
    """The largest batch `log` takes: its topic's maxMessageSize policy, else the broker's."""
    return int(log.policy(MAX_MESSAGE_SIZE))
