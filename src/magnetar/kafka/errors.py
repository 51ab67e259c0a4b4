"""Kafka's error code for each failure a request meets, in one table every API answers from.

A request's handlers catch `ANSWERABLE` and answer `kafka_error(exc)`: the listener's own
failures, the broker's (a BrokerServiceError, by its Pulsar ServerError code) and
storage's. Kafka reports a failure per topic or partition, so nothing here closes a
connection: an exception that is not in the table is a bug, which the connection logs.

What a ServerError code means depends on the request only where the code says nothing
particular (NotAllowedError, MetadataError, ...): each caller names that `otherwise`
(INVALID_REQUEST for an admin request the broker refused, POLICY_VIOLATION for a publish
check, UNKNOWN_SERVER_ERROR by default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.broker.errors import BrokerServiceError, InvalidPartitionCountError
from magnetar.kafka.groups import GroupError
from magnetar.kafka.protocol.records import BatchTooLarge, InvalidRecords
from magnetar.kafka.topic_configs import InvalidConfig
from magnetar.kafka.topics import UnknownPartition
from magnetar.storage import StorageClosedError, StorageError, WriteFailedError
from magnetar.wire.proto import pulsar_api_pb2 as pb

Answer = tuple[ErrorCode, str | None]
"""Kafka's error code and the reason a response carries with it (None: no reason given)."""


class Unauthorized(Exception):
    """The role may not do this to a topic (Kafka's TOPIC_AUTHORIZATION_FAILED); says why."""


class TxnRefused(Exception):
    """A transactional request (or a transactional batch) Kafka answers with `code`; says why."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class MessageTooLarge(ValueError):
    """A batch over maxMessageSize (Kafka's MESSAGE_TOO_LARGE)."""


#: The broker's refusals whose code says what Kafka calls them, whatever the request.
_BY_SERVER_ERROR = {
    pb.TopicNotFound: ErrorCode.unknown_topic_or_partition,
    pb.TopicTerminatedError: ErrorCode.policy_violation,
    pb.ProducerBlockedQuotaExceededException: ErrorCode.policy_violation,
    # nothing stored and retried by every Kafka producer until delivery.timeout.ms, as Pulsar's
    # client holds its sends (see publish_policies)
    pb.ProducerBlockedQuotaExceededError: ErrorCode.not_enough_replicas,
    pb.IncompatibleSchema: ErrorCode.invalid_record,
    # a topic pausing after its ledger failed a write (topics.failed_writes): retried, as Kafka
    # producers retry a failed log directory
    pb.ServiceNotReady: ErrorCode.kafka_storage_error,
}

#: Most specific first (InvalidPartitionCountError is a BrokerServiceError, WriteFailedError a
#: StorageClosedError, which is a StorageError).
_RULES: tuple[tuple[type[Exception], Callable[[Any], Answer]], ...] = (
    (GroupError, lambda exc: (exc.code, None)),
    (TxnRefused, lambda exc: (exc.code, str(exc))),
    (Unauthorized, lambda exc: (ErrorCode.topic_authorization_failed, str(exc))),
    (UnknownPartition, lambda _: (ErrorCode.unknown_topic_or_partition, None)),
    (BatchTooLarge, lambda exc: (ErrorCode.message_too_large, str(exc))),
    (InvalidRecords, lambda exc: (ErrorCode.corrupt_message if exc.corrupt else ErrorCode.invalid_record, str(exc))),
    (MessageTooLarge, lambda exc: (ErrorCode.message_too_large, str(exc))),
    (InvalidConfig, lambda exc: (ErrorCode.invalid_config, str(exc))),
    (InvalidPartitionCountError, lambda exc: (ErrorCode.invalid_partitions, exc.message)),
    (WriteFailedError, lambda exc: (ErrorCode.kafka_storage_error, str(exc))),
    # deleted or unloaded while the request ran: the client looks the partition up again
    (StorageClosedError, lambda _: (ErrorCode.unknown_topic_or_partition, None)),
    (StorageError, lambda exc: (ErrorCode.kafka_storage_error, str(exc))),
)

ANSWERABLE: tuple[type[Exception], ...] = (*(kind for kind, _ in _RULES), BrokerServiceError)
"""What a request's handlers catch and answer with `kafka_error`."""


def kafka_error(exc: Exception, otherwise: ErrorCode = ErrorCode.unknown_server_error) -> Answer:
    """Kafka's answer to `exc`, one of ANSWERABLE; `otherwise` for a broker refusal whose
    ServerError code Kafka has no name for."""
    for kind, answer in _RULES:
        if isinstance(exc, kind):
            return answer(exc)
    if isinstance(exc, BrokerServiceError):
        return _BY_SERVER_ERROR.get(exc.code, otherwise), exc.message
    raise TypeError(f"no Kafka error for {type(exc).__name__}") from exc
