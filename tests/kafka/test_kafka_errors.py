"""kafka.errors: the one table of Kafka's answers to magnetar's failures."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from magnetar.broker.errors import BrokerServiceError, InvalidPartitionCountError, ResourceNotFoundError
from magnetar.kafka.errors import ANSWERABLE, MessageTooLarge, Unauthorized, kafka_error
from magnetar.kafka.groups import GroupError
from magnetar.kafka.protocol.records import InvalidRecords
from magnetar.kafka.topic_configs import InvalidConfig
from magnetar.kafka.topics import UnknownPartition
from magnetar.storage import StorageClosedError, StorageError, StorageFullError, WriteFailedError
from magnetar.wire.proto import pulsar_api_pb2 as pb

CASES = [
    (Unauthorized("role app may not produce"), (ErrorCode.topic_authorization_failed, "role app may not produce")),
    (UnknownPartition("t-3"), (ErrorCode.unknown_topic_or_partition, None)),
    (GroupError(ErrorCode.illegal_generation), (ErrorCode.illegal_generation, None)),
    (InvalidRecords("bad crc"), (ErrorCode.corrupt_message, "bad crc")),
    (InvalidRecords("no records", corrupt=False), (ErrorCode.invalid_record, "no records")),
    (MessageTooLarge("too big"), (ErrorCode.message_too_large, "too big")),
    (InvalidConfig("retention.ms: not a number"), (ErrorCode.invalid_config, "retention.ms: not a number")),
    (InvalidPartitionCountError("too many"), (ErrorCode.invalid_partitions, "too many")),
    (WriteFailedError("failed a write: EIO"), (ErrorCode.kafka_storage_error, "failed a write: EIO")),
    (StorageClosedError("closed"), (ErrorCode.unknown_topic_or_partition, None)),
    (StorageFullError("no space"), (ErrorCode.kafka_storage_error, "no space")),
    (ResourceNotFoundError("Namespace x/y does not exist"),
     (ErrorCode.unknown_topic_or_partition, "Namespace x/y does not exist")),
    (BrokerServiceError(pb.TopicTerminatedError, "terminated"), (ErrorCode.policy_violation, "terminated")),
    (BrokerServiceError(pb.ProducerBlockedQuotaExceededError, "held"), (ErrorCode.not_enough_replicas, "held")),
    (BrokerServiceError(pb.IncompatibleSchema, "schema"), (ErrorCode.invalid_record, "schema")),
]


@pytest.mark.parametrize(("exc", "answer"), CASES, ids=[type(exc).__name__ for exc, _ in CASES])
def test_each_failure_has_its_answer_and_is_caught(exc, answer):
    assert isinstance(exc, ANSWERABLE)
    assert kafka_error(exc) == answer


def test_a_refusal_kafka_has_no_name_for_is_what_the_request_says():
    refused = BrokerServiceError(pb.NotAllowedError, "no")
    assert kafka_error(refused) == (ErrorCode.unknown_server_error, "no")
    assert kafka_error(refused, otherwise=ErrorCode.invalid_request) == (ErrorCode.invalid_request, "no")
    # a code with a name of its own keeps it whatever the request
    terminated = BrokerServiceError(pb.TopicTerminatedError, "t")
    assert kafka_error(terminated, otherwise=ErrorCode.invalid_request)[0] == ErrorCode.policy_violation


def test_what_is_not_in_the_table_is_not_hidden():
    with pytest.raises(TypeError, match="no Kafka error for KeyError"):
        kafka_error(KeyError("x"))
    assert issubclass(StorageError, ANSWERABLE)
