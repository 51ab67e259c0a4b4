"""Sans-IO pieces of the client: batch cutting, routing, ids, errors."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.client import MessageId, errors
from magnetar.client.aio.routing import Router, java_string_hash
from magnetar.client.batching import BatchContainer, KeyBasedContainer
from magnetar.client.enums import PartitionsRoutingMode
from magnetar.client.outgoing import PendingMessage
from magnetar.wire.proto import pulsar_api_pb2 as pb


def _msg(seq, value=b"v", properties=None, key=None):
    return PendingMessage(value, seq, None, properties, key)


def test_worked_example_cuts_four_batches():
    container = BatchContainer(1000, 1 << 20, ["region", "version"])
    props = [{"region": "eu"}, {"region": "eu"}, {"region": "eu", "version": "1", "tag": "a"},
             {"region": "eu", "version": "1"}, {"region": "us", "version": "1"}, {"region": "us", "version": "2"}]
    batches = []
    for seq, p in enumerate(props):
        batches += container.add(_msg(seq, properties=p))
    batches += container.cut()
    assert [[m.sequence_id for m in b.messages] for b in batches] == [[0, 1], [2, 3], [4], [5]]
    assert [dict(b.filter_values) for b in batches] == [
        {"region": "eu"}, {"region": "eu", "version": "1"}, {"region": "us", "version": "1"},
        {"region": "us", "version": "2"}]


def test_count_and_size_limits():
    container = BatchContainer(3, 10)
    out = [container.add(_msg(i, b"abcd")) for i in range(4)]
    assert [len(o) for o in out] == [0, 0, 1, 0]  # 12 bytes would not fit: the third starts a new batch
    assert [m.sequence_id for m in out[2][0].messages] == [0, 1]
    counted = BatchContainer(2, 1 << 20)
    assert [len(counted.add(_msg(i))) for i in range(4)] == [0, 1, 0, 1]


def test_key_based_batches_by_key_in_sequence_order():
    container = KeyBasedContainer(6, 1 << 20)
    out = []
    for seq, key in enumerate(["a", "b", "a", None, "b", "a"]):
        out += container.add(_msg(seq, key=key))
    assert [[m.sequence_id for m in b.messages] for b in out] == [[0, 2, 5], [1, 4], [3]]


def test_java_string_hash_matches_java():
    # well-known String.hashCode() values
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("abc") == 96354
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == 2**31 & 0x7FFFFFFF  # hashCode() is Integer.MIN_VALUE


def test_router_modes():
    keyed = Router(PartitionsRoutingMode.RoundRobinDistribution, 4, batching=False, switch_ms=10)
    assert len({keyed.choose("same") for _ in range(10)}) == 1
    assert {keyed.choose(None) for _ in range(8)} == {0, 1, 2, 3}
    single = Router(PartitionsRoutingMode.UseSinglePartition, 4, batching=False, switch_ms=10)
    assert len({single.choose(None) for _ in range(10)}) == 1
    custom = Router(PartitionsRoutingMode.CustomPartition, 4, batching=False, switch_ms=10, custom=lambda m, n: 2)
    assert custom.choose("k") == 2


def test_message_ids_match_the_official_ones():
    for args in [(-1, 1, 2, -1), (3, 1, 2, 5), (-1, -1, -1, -1)]:
        ours, theirs = MessageId(*args), pulsar.MessageId(*args)
        assert ours.serialize() == theirs.serialize()
        assert str(ours) == str(theirs._msg_id)
    assert MessageId.earliest.serialize() == pulsar.MessageId.earliest.serialize()
    assert MessageId.latest.serialize() == pulsar.MessageId.latest.serialize()
    assert MessageId(-1, 1, 2, 0) < MessageId(-1, 1, 2, 1) < MessageId(-1, 1, 3, -1)
    assert MessageId(-1, 1, 2, -1) < MessageId(-1, 1, 2, 0)
    assert MessageId(0, 1, 2) != MessageId(1, 1, 2)
    assert MessageId.deserialize(pulsar.MessageId(2, 7, 8, 1).serialize()) == MessageId(2, 7, 8, 1)


@pytest.mark.parametrize(("code", "cls"), [(pb.TopicNotFound, errors.TopicNotFound),
                                           (pb.ServiceNotReady, errors.ServiceUnitNotReady),
                                           (pb.TooManyRequests, errors.TooManyLookupRequestException),
                                           (pb.MetadataError, errors.BrokerMetadataError)])
def test_server_errors_map_to_the_official_exception_names(code, cls):
    exc = errors.server_error(code, "because")
    assert type(exc) is cls and exc.code == code and "because" in str(exc)
    assert cls.__name__ in dir(pulsar)
