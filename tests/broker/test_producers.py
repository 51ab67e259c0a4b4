"""Producers: access modes, names, receipts in send order, reconnect after restart.

Access-mode refusals follow Pulsar's AbstractTopic.incrementTopicEpochIfNeeded
(and its ExclusiveProducerTest): an Exclusive producer meeting any producer is
ProducerFenced; a Shared producer meeting an exclusive one is ProducerBusy; only then
is a name already connected ProducerBusy (NamingException). ExclusiveWithFencing closes
every other producer, and a producer holding an older topic epoch is fenced for good.
"""

from __future__ import annotations

import random
import threading
import time

import pulsar
import pytest
from admin_http import http
from rawclient import RawClient, send_frame

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
Mode = pulsar.ProducerAccessMode
EARLIEST = pulsar.InitialPosition.Earliest


def _ids(msg_id: pulsar.MessageId) -> tuple[int, int, int]:
    return msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index()


@pytest.mark.parametrize(
    ("first", "second", "error"),
    [
        (Mode.Exclusive, Mode.Exclusive, pulsar.ProducerFenced),
        (Mode.Exclusive, Mode.Shared, pulsar.ProducerBusy),
        (Mode.Shared, Mode.Exclusive, pulsar.ProducerFenced),
        (Mode.ExclusiveWithFencing, Mode.Exclusive, pulsar.ProducerFenced),
        (Mode.ExclusiveWithFencing, Mode.Shared, pulsar.ProducerBusy),
    ],
    ids=lambda v: str(v).rsplit(".", 1)[-1] if not isinstance(v, type) else v.__name__,
)
def test_access_mode_conflicts(client, first, second, error):
    topic = "access-mode"
    holder = client.create_producer(topic, access_mode=first)
    with pytest.raises(error):
        client.create_producer(topic, access_mode=second)
    holder.send(b"still mine")
    holder.close()
    # Once the holder is gone, the refused mode is accepted.
    client.create_producer(topic, access_mode=second).send(b"now mine")


def test_shared_producers_coexist(client):
    producers = [client.create_producer("shared-many", access_mode=Mode.Shared) for _ in range(3)]
    for i, producer in enumerate(producers):
        producer.send(f"{i}".encode())
    reader = client.create_reader("shared-many", pulsar.MessageId.earliest)
    assert sorted(reader.read_next(10000).data() for _ in producers) == [b"0", b"1", b"2"]


def test_exclusive_with_fencing_takes_over(client_factory, broker):
    old_client = client_factory(broker.url, operation_timeout_seconds=3)
    old = old_client.create_producer("fencing", batching_enabled=False, send_timeout_millis=3000)
    old.send(b"before")
    new = client_factory(broker.url).create_producer("fencing", access_mode=Mode.ExclusiveWithFencing)
    new.send(b"after")
    deadline = time.monotonic() + 15
    while True:  # the old producer is closed for good: its sends fail from now on
        try:
            old.send(b"fenced out")
        except pulsar.PulsarException:
            break
        assert time.monotonic() < deadline, "the fenced producer can still send"
    reader = client_factory(broker.url).create_reader("fencing", pulsar.MessageId.earliest)
    got = [reader.read_next(10000).data() for _ in range(2)]
    assert got == [b"before", b"after"]
    new.send(b"later")
    assert reader.read_next(10000).data() == b"later"


def _fails_within(producer, deadline_s: float = 15.0) -> pulsar.PulsarException:
    """Send until a send fails (a fenced producer learns it on its next reconnect)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            producer.send(b"fenced out")
        except pulsar.PulsarException as exc:
            return exc
        assert time.monotonic() < deadline, "the fenced producer can still send"


def test_exclusive_with_fencing_fences_an_exclusive_producer(client_factory, broker):
    old_client = client_factory(broker.url, operation_timeout_seconds=3)
    old = old_client.create_producer("fence-exclusive", access_mode=Mode.Exclusive, batching_enabled=False,
                                     send_timeout_millis=3000)
    old.send(b"before")
    new_client = client_factory(broker.url)
    new = new_client.create_producer("fence-exclusive", access_mode=Mode.ExclusiveWithFencing)
    new.send(b"after")
    assert isinstance(_fails_within(old), (pulsar.ProducerFenced, pulsar.AlreadyClosed))
    # Fenced for good: not even the new producer leaving lets the old one back in.
    new.close()
    with pytest.raises((pulsar.ProducerFenced, pulsar.AlreadyClosed)):
        old.send(b"still fenced")
    reader = client_factory(broker.url).create_reader("fence-exclusive", pulsar.MessageId.earliest)
    assert [reader.read_next(10000).data() for _ in range(2)] == [b"before", b"after"]
    assert not reader.has_message_available()


def test_exclusive_with_fencing_takes_a_taken_name(client_factory, broker):
    holder = client_factory(broker.url).create_producer("fence-name", producer_name="p", batching_enabled=False,
                                                        send_timeout_millis=3000)
    taker = client_factory(broker.url).create_producer("fence-name", producer_name="p",
                                                       access_mode=Mode.ExclusiveWithFencing)
    assert taker.producer_name() == "p"
    taker.send(b"mine")
    assert isinstance(_fails_within(holder), pulsar.PulsarException)


@pytest.mark.parametrize("holder_mode", [Mode.Shared, Mode.Exclusive], ids=["shared", "exclusive"])
def test_exclusive_with_a_taken_name_is_fenced_not_busy(client_factory, broker, holder_mode):
    """Pulsar settles the access mode before it looks at names (NamingException comes later)."""
    client_factory(broker.url).create_producer("taken-exclusive", producer_name="p", access_mode=holder_mode)
    with pytest.raises(pulsar.ProducerFenced):
        client_factory(broker.url).create_producer("taken-exclusive", producer_name="p",
                                                   access_mode=Mode.Exclusive)


def test_stale_topic_epoch_is_fenced_across_restart(broker):
    """An exclusive producer coming back with the epoch it held before another one took the
    topic is refused, even after a restart; one with the current epoch gets it back."""

    def claim(raw: RawClient, request_id: int, epoch: int | None) -> T:
        cmd = pb.CommandProducer(topic="epochs", producer_id=request_id, request_id=request_id,
                                 producer_access_mode=pb.Exclusive)
        if epoch is not None:
            cmd.topic_epoch = epoch
        raw.command(T(type=T.PRODUCER, producer=cmd))
        frame = raw.next_frame()
        assert frame is not None
        return frame.command

    def close(raw: RawClient, producer_id: int) -> None:
        raw.command(T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(
            producer_id=producer_id, request_id=100 + producer_id)))
        raw.expect(T.SUCCESS)

    raw = RawClient(broker.url)
    raw.connect()
    first = claim(raw, 1, None).producer_success.topic_epoch
    close(raw, 1)
    second = claim(raw, 2, None).producer_success.topic_epoch
    assert second == first + 1
    close(raw, 2)
    raw.close()
    broker.restart()
    raw = RawClient(broker.url)
    raw.connect()
    refused = claim(raw, 3, first)
    assert refused.type == T.ERROR and refused.error.error == pb.ProducerFenced, refused
    assert claim(raw, 4, second).producer_success.topic_epoch == second
    raw.close()


def test_name_already_connected_is_busy(broker, client_factory):
    first = client_factory(broker.url).create_producer("named", producer_name="alice")
    for other in (client_factory(broker.url), client_factory(broker.url)):
        with pytest.raises(pulsar.ProducerBusy):
            other.create_producer("named", producer_name="alice")
    # The same name on another topic is a different producer.
    client_factory(broker.url).create_producer("named-elsewhere", producer_name="alice").send(b"x")
    first.send(b"alice is fine")


def test_close_then_same_name_works(client):
    producer = client.create_producer("reuse", producer_name="bob")
    producer.send(b"1")
    producer.close()
    again = client.create_producer("reuse", producer_name="bob")
    assert again.producer_name() == "bob"
    again.send(b"2")
    reader = client.create_reader("reuse", pulsar.MessageId.earliest)
    assert [reader.read_next(10000).data() for _ in range(2)] == [b"1", b"2"]


def test_raw_close_producer_frees_the_name(broker):
    raw = RawClient(broker.url)
    raw.connect()
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(
        topic="raw-reuse", producer_id=0, request_id=1, producer_name="carol")))
    raw.expect(T.PRODUCER_SUCCESS)
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(
        topic="raw-reuse", producer_id=1, request_id=2, producer_name="carol")))
    refused = raw.expect(T.ERROR).error
    assert (refused.request_id, refused.error) == (2, pb.ProducerBusy)
    raw.command(T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(producer_id=0, request_id=3)))
    assert raw.expect(T.SUCCESS).success.request_id == 3
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(
        topic="raw-reuse", producer_id=1, request_id=4, producer_name="carol")))
    assert raw.expect(T.PRODUCER_SUCCESS).producer_success.producer_name == "carol"
    raw.close()


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_send_async_burst_completes_in_send_order(client, batching):
    count = 2000
    producer = client.create_producer(
        f"burst-{batching}", batching_enabled=batching, batching_max_messages=100,
        max_pending_messages=count, block_if_queue_full=True,
    )
    done: list[tuple[int, tuple[int, int, int]]] = []
    results: set[pulsar.Result] = set()
    finished = threading.Event()

    def callback(i: int):
        def on_done(result, msg_id):
            results.add(result)
            done.append((i, _ids(msg_id)))
            if len(done) == count:
                finished.set()
        return on_done

    for i in range(count):
        producer.send_async(f"{i}".encode(), callback(i))
    producer.flush()
    assert finished.wait(30), f"only {len(done)} of {count} callbacks"
    assert results == {pulsar.Result.Ok}
    assert [i for i, _ in done] == list(range(count))
    ids = [msg_id for _, msg_id in done]
    assert ids == sorted(ids) and len(set(ids)) == count
    if batching:
        assert len({(ledger, entry) for ledger, entry, _ in ids}) < count  # really batched
    else:
        assert all(batch == -1 for _, _, batch in ids)
    assert producer.last_sequence_id() == count - 1
    consumer = client.subscribe(f"burst-{batching}", "check", initial_position=EARLIEST)
    received = [consumer.receive(10000) for _ in range(count)]
    assert [m.data() for m in received] == [f"{i}".encode() for i in range(count)]
    assert [_ids(m.message_id()) for m in received] == ids


def test_pipelined_sends_get_receipts_in_send_order(broker):
    raw = RawClient(broker.url)
    raw.connect()
    name = raw.create_producer("pipelined")
    count = 500
    raw.write(b"".join(send_frame(0, 1000 + i, f"{i}".encode() * 50, producer_name=name) for i in range(count)))
    receipts = [raw.expect(T.SEND_RECEIPT).send_receipt for _ in range(count)]
    assert [r.sequence_id for r in receipts] == [1000 + i for i in range(count)]
    positions = [(r.message_id.ledgerId, r.message_id.entryId) for r in receipts]
    assert positions == sorted(positions) and len(set(positions)) == count
    raw.close()


def test_refused_sends_inside_one_read_keep_their_place(broker):
    """SENDs of one socket read are stored as a group; a corrupt one among them is refused
    at once, and its SEND_ERROR must still come between the receipts of its neighbours."""
    rng = random.Random(19)
    raw = RawClient(broker.url)
    raw.connect()
    name = raw.create_producer("grouped-refusals")
    corrupt = {i for i in range(300) if rng.random() < 0.1}
    raw.write(b"".join(send_frame(0, i, f"m{i}".encode() * 20, producer_name=name, corrupt=i in corrupt)
                       for i in range(300)))
    answers = [raw.next_frame(10).command for _ in range(300)]
    kinds = [(a.send_error.sequence_id, "error") if a.type == T.SEND_ERROR else (a.send_receipt.sequence_id, "ok")
             for a in answers]
    assert kinds == [(i, "error" if i in corrupt else "ok") for i in range(300)]
    assert all(a.send_error.error == pb.ChecksumError for a in answers if a.type == T.SEND_ERROR)
    raw.close()


def test_producer_reconnects_after_broker_restart(broker, client_factory):
    client = client_factory(broker.url, operation_timeout_seconds=30)
    producer = client.create_producer("restart-producer", batching_enabled=False, send_timeout_millis=30000)
    before = [producer.send(f"before-{i}".encode()) for i in range(10)]
    port = broker.port
    broker.restart()
    assert broker.port == port
    after = [producer.send(f"after-{i}".encode()) for i in range(10)]  # blocks until reconnected
    assert producer.is_connected()
    assert _ids(after[0])[:2] > _ids(before[-1])[:2]
    reader = client.create_reader("restart-producer", pulsar.MessageId.earliest)
    got = [reader.read_next(10000).data() for _ in range(20)]
    assert got == [f"before-{i}".encode() for i in range(10)] + [f"after-{i}".encode() for i in range(10)]
    assert not reader.has_message_available()


def test_sends_in_flight_to_a_producer_the_broker_closed_are_dropped(broker):
    """A SEND may cross the broker's CLOSE_PRODUCER (unload, fencing, a revoked permission):
    Pulsar drops it (recentlyClosedProducers) and keeps the connection, whose consumers and
    other producers the client still uses; only a SEND to a producer never known closes it."""
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer("persistent://public/default/closed-under-it", producer_id=7, request_id=1)
    assert http("PUT", f"{broker.admin_url}/admin/v2/persistent/public/default/closed-under-it/unload")[0] == 204
    raw.send(7, 0, b"in flight")
    assert raw.expect(T.CLOSE_PRODUCER).close_producer.producer_id == 7  # sent before the SEND was read
    raw.ping()  # still served
    raw.send(8, 0, b"to nobody")
    assert raw.closed_by_peer()
    raw.close()
