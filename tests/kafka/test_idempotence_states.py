"""ProducerStates against a real partition of an in-process BrokerService (no network)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.service.protocol_handlers import HandlerBroker, PartitionLog
from magnetar.formats.kafka_records import KafkaBatchHeader
from magnetar.kafka.idempotence import ACCEPT, ProducerStates
from magnetar.kafka.protocol.records import ProducedBatch


@pytest.fixture
def partition(tmp_path) -> Iterator[PartitionLog]:
    service = BrokerService(ServiceConfiguration(), tmp_path)
    try:
        service.get_topic("persistent://public/default/idempotence")  # a handler's log is never created
        yield HandlerBroker(service).partition_log("persistent://public/default/idempotence")
    finally:
        service.factory.close()


def _batch(producer_id: int, sequence: int, count: int = 3) -> ProducedBatch:
    header = KafkaBatchHeader(base_offset=0, length=0, leader_epoch=0, magic=2, crc=0, attributes=0,
                              last_offset_delta=count - 1, base_timestamp=0, max_timestamp=0,
                              producer_id=producer_id, producer_epoch=0, base_sequence=sequence, count=count)
    return ProducedBatch(memoryview(b"records"), header)


def test_a_snapshot_keeps_a_producer_whose_first_batch_is_still_being_stored(partition) -> None:
    """Another producer's batch snapshots the partition while the first one's first batch is
    being stored (it has no durable batch yet, so no last time): it must stay known, so the
    retry of that batch is answered with its offset instead of being stored again."""
    states = ProducerStates(snapshot_interval=1)
    first, other = _batch(producer_id=1, sequence=0), _batch(producer_id=2, sequence=0)
    assert states.check(partition, first) == states.check(partition, other) == ACCEPT
    states.stored(partition, other, base_offset=0)  # a snapshot, with `first` in flight
    states.stored(partition, first, base_offset=3)
    assert states.check(partition, first).duplicate_of == 3


@pytest.mark.parametrize("start", [0, (1 << 31) - 4])  # and across the wrap of sequences
def test_pipelined_batches_failing_in_turn_let_the_first_of_them_come_again(partition, start) -> None:
    """Three requests of a producer in flight at once; a failed write fails them all, each
    forgotten in the order they were stored: the producer retries from the first, which must be
    accepted (the expected sequence had moved forward to the last one's)."""
    states = ProducerStates(snapshot_interval=100)
    states.check(partition, _batch(producer_id=7, sequence=start, count=1))
    states.stored(partition, _batch(producer_id=7, sequence=start, count=1), base_offset=0)
    batches = [_batch(producer_id=7, sequence=(start + 1 + 3 * n) % (1 << 31)) for n in range(3)]
    assert [states.check(partition, b) for b in batches] == [ACCEPT] * 3
    for failed in batches:
        states.forget(partition, [failed])
    assert states.check(partition, batches[0]) is ACCEPT


def test_a_retry_sent_while_its_first_try_is_being_written_is_asked_to_retry(partition) -> None:
    """Not OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka takes as fatal: a retriable error, and
    the next retry, once the first try is durable, is answered with its offset."""
    states = ProducerStates(snapshot_interval=100)
    durable, in_flight = _batch(producer_id=9, sequence=0), _batch(producer_id=9, sequence=3)
    assert states.check(partition, durable) is ACCEPT
    assert states.check(partition, durable).error == ErrorCode.not_enough_replicas  # its own first try in flight
    states.stored(partition, durable, base_offset=0)
    assert states.check(partition, in_flight) is ACCEPT
    assert states.check(partition, durable).duplicate_of == 0
    assert states.check(partition, in_flight).error == ErrorCode.not_enough_replicas
    states.stored(partition, in_flight, base_offset=3)
    assert states.check(partition, in_flight).duplicate_of == 3
    assert states.check(partition, _batch(producer_id=9, sequence=9)).error == ErrorCode.out_of_order_sequence_number
