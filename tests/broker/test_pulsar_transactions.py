"""Transactions (PIP-31) against a real broker: produced with magnetar.client (the official
Python client has no transactions), consumed with both clients.

What a consumer must see: a committed transaction's messages whole, an aborted one's
never, an open one's not yet, and nothing published after an open transaction's first
message before that transaction ends (Pulsar's maxReadPosition).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from compaction_helpers import compact, topic_path
from polling import wait_for
from rawclient import RawClient
from standalone import Standalone
from transactional_brokers import TXN_ON, module_broker

import magnetar.client
from magnetar.client import aio
from magnetar.wire.entry import build_entry
from magnetar.wire.frames import encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

CONSUMERS = ["official", "magnetar"]
QUIET = 0.3
"""How long a receive waits to show that nothing is delivered (a message that is there comes in ms)."""


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from module_broker(tmp_path_factory, "txn")


def _client(kind: str, url: str):
    if kind == "official":
        return pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    return magnetar.client.Client(url, operation_timeout_seconds=10)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Standalone]:
    """A broker of the test's own, for the tests that kill and restart it."""
    broker = Standalone(tmp_path / "data", [TXN_ON]).start()
    yield broker
    broker.stop()


@pytest.fixture
def clients() -> Iterator:
    made: list = []

    def make(kind: str, url: str, **kwargs):
        client = magnetar.client.Client(url, operation_timeout_seconds=10, **kwargs) if kwargs else _client(kind, url)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def _topic(name: str) -> str:
    return f"persistent://public/default/txn-{name}-{uuid.uuid4().hex[:8]}"


def _drain(consumer, timeout_ms: int = int(QUIET * 1000)) -> list[bytes]:
    """Everything the consumer gets until it stays quiet for `timeout_ms`, acknowledged."""
    got = []
    while True:
        try:
            message = consumer.receive(timeout_ms)
        except Exception:  # Timeout, in either client's spelling
            return got
        got.append(message.data())
        consumer.acknowledge(message)


def _receive(consumer, count: int) -> list[bytes]:
    got = []
    for _ in range(count):
        message = consumer.receive(10_000)
        got.append(message.data())
        consumer.acknowledge(message)
    return got


@pytest.mark.parametrize("kind", CONSUMERS)
def test_open_transaction_holds_back_its_topic_until_commit_then_delivers_whole(txn_broker, clients, kind):
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    t1, t2 = _topic("a"), _topic("b")
    consuming = clients(kind, txn_broker.url)
    c1 = consuming.subscribe(t1, "s", initial_position=pulsar.InitialPosition.Earliest)
    c2 = consuming.subscribe(t2, "s", initial_position=pulsar.InitialPosition.Earliest)
    p1, p2 = producing.create_producer(t1), producing.create_producer(t2)
    p1.send(b"before")
    txn = producing.new_transaction(timeout=30)
    for i in range(3):
        p1.send(f"t1-{i}".encode(), txn=txn)
    p2.send(b"t2-0", txn=txn)
    p1.send(b"after")  # behind the open transaction: held too
    assert _drain(c1) == [b"before"]
    assert _drain(c2) == []
    txn.commit()
    assert _receive(c1, 4) == [b"t1-0", b"t1-1", b"t1-2", b"after"]
    assert _receive(c2, 1) == [b"t2-0"]
    aborted = producing.new_transaction(timeout=30)
    p1.send(b"aborted-1", txn=aborted)
    p2.send(b"aborted-2", txn=aborted)
    p1.send(b"later")
    aborted.abort()
    assert _drain(c1) == [b"later"]
    assert _drain(c2) == []


@pytest.mark.parametrize("kind", CONSUMERS)
def test_randomized_commits_and_aborts_across_two_topics(txn_broker, clients, kind):
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    topics = [_topic("r1"), _topic("r2")]
    producers = [producing.create_producer(t) for t in topics]
    expected: dict[str, list[bytes]] = {t: [] for t in topics}
    open_txns = []
    for n in range(12):
        txn = producing.new_transaction(timeout=30)
        sent = []
        for i in range(rng.randint(1, 4)):
            which = rng.randrange(2)
            value = f"txn{n}-{i}".encode()
            producers[which].send_async(value, None, txn=txn)
            sent.append((topics[which], value))
        if rng.random() < 0.3:  # plain messages among them, held behind whatever is open
            which = rng.randrange(2)
            producers[which].send(f"plain{n}".encode())
            expected[topics[which]].append(f"plain{n}".encode())
        open_txns.append((txn, sent, rng.random() < 0.5))
        if len(open_txns) > 2 or n == 11:  # end them out of order
            rng.shuffle(open_txns)
            for txn_, sent_, commit in open_txns:
                if commit:
                    txn_.commit()
                    for topic, value in sent_:
                        expected[topic].append(value)
                else:
                    txn_.abort()
            open_txns = []
    consuming = clients(kind, txn_broker.url)
    for topic in topics:
        consumer = consuming.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = _receive(consumer, len(expected[topic])) + _drain(consumer)
        assert sorted(got) == sorted(expected[topic]), f"seed {seed}"
        assert len(got) == len(set(got)), f"seed {seed}: duplicates"


def test_readers_skip_markers_and_aborted_messages(txn_broker, clients):
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    topic = _topic("reader")
    producer = producing.create_producer(topic)
    for commit in (True, False, True):
        txn = producing.new_transaction(timeout=30)
        producer.send(b"c" if commit else b"a", txn=txn)
        txn.commit() if commit else txn.abort()
    still_open = producing.new_transaction(timeout=30)
    producer.send(b"open", txn=still_open)
    for kind in CONSUMERS:
        reader = clients(kind, txn_broker.url).create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():  # the last message id names no marker, aborted or held message
            got.append(reader.read_next(10_000).data())
        assert got == [b"c", b"c"], kind
    still_open.abort()


@pytest.mark.parametrize("sub_type", [pulsar.ConsumerType.Shared, pulsar.ConsumerType.Failover])
@pytest.mark.parametrize("kind", CONSUMERS)
def test_ack_in_open_transaction_is_held_from_other_consumers_and_released_by_abort(txn_broker, clients, kind,
                                                                                     sub_type):
    """Failover: the next active consumer reads again from the first unacknowledged entry,
    past what the transaction holds; Shared: it gets what the first one held unacknowledged."""
    topic = _topic("acks")
    txn_client = clients("magnetar", txn_broker.url, enable_transaction=True)
    producer = txn_client.create_producer(topic, batching_enabled=False)
    first = txn_client.subscribe(topic, "s", consumer_type=sub_type,
                                 initial_position=pulsar.InitialPosition.Earliest)
    for i in range(4):
        producer.send(f"m{i}".encode())
    held = [first.receive(10_000), first.receive(10_000)]
    txn = txn_client.new_transaction(timeout=30)
    for message in held:
        first.acknowledge(message, txn=txn)
    other = txn_client.new_transaction(timeout=30)
    with pytest.raises(magnetar.client.errors.TransactionConflict):
        first.acknowledge(held[0], txn=other)
    first.close()  # what it held but did not acknowledge goes to the next consumer; what the txn holds does not
    second = clients(kind, txn_broker.url).subscribe(topic, "s", consumer_type=sub_type)
    rest = sorted(_receive(second, 2) + _drain(second))
    assert rest == sorted({b"m0", b"m1", b"m2", b"m3"} - {m.data() for m in held})
    txn.abort()
    assert sorted(_receive(second, 2)) == sorted(m.data() for m in held)


def _ack_first_in_txn(clients, url: str, topic: str, values: list[bytes], timeout: int):
    """`values` produced, the first received on Shared subscription "s" and acknowledged in a
    new transaction: (the consumer, the transaction)."""
    txn_client = clients("magnetar", url, enable_transaction=True)
    producer = txn_client.create_producer(topic)
    consumer = txn_client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
    for value in values:
        producer.send(value)
    txn = txn_client.new_transaction(timeout=timeout)
    consumer.acknowledge(consumer.receive(10_000), txn=txn)
    return consumer, txn


def test_committed_acks_stay_acknowledged_across_a_restart(own_broker: Standalone, clients):
    broker = own_broker
    topic = _topic("ack-commit")
    consumer, txn = _ack_first_in_txn(clients, broker.url, topic, [b"m0", b"m1", b"m2"], timeout=30)
    txn.commit()
    consumer.close()  # else it takes the rest back once the broker is up again
    broker.kill()
    broker.start()
    again = clients("official", broker.url).subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    assert sorted(_receive(again, 2) + _drain(again)) == [b"m1", b"m2"]


def test_commit_answered_before_sigkill_is_visible_after_restart(own_broker: Standalone, clients):
    broker = own_broker
    topics = [_topic("k1"), _topic("k2")]
    producing = clients("magnetar", broker.url, enable_transaction=True)
    producers = [producing.create_producer(t) for t in topics]
    txn = producing.new_transaction(timeout=30)
    for producer in producers:
        producer.send(b"committed", txn=txn)
    txn.commit()
    broker.kill()  # SIGKILL: nothing saved on the way out
    broker.start()
    consumers = [clients(kind, broker.url).subscribe(topic, f"s-{kind}",
                                                     initial_position=pulsar.InitialPosition.Earliest)
                 for kind in CONSUMERS for topic in topics]  # all before any acknowledges (retention 0)
    for consumer in consumers:
        assert _receive(consumer, 1) + _drain(consumer) == [b"committed"]
    later = clients("magnetar", broker.url, enable_transaction=True).new_transaction(timeout=30)
    assert later.txn_id.least > txn.txn_id.least  # the coordinator's sequence survived the kill


def test_transaction_open_at_sigkill_is_aborted_at_its_timeout_after_restart(own_broker: Standalone, clients):
    broker = own_broker
    topic = _topic("open")
    producing = clients("magnetar", broker.url, enable_transaction=True)
    producer = producing.create_producer(topic)
    txn = producing.new_transaction(timeout=2)
    producer.send(b"never", txn=txn)
    producer.send(b"plain")
    broker.kill()
    broker.start()
    consumers = [clients(kind, broker.url).subscribe(topic, f"s-{kind}",
                                                     initial_position=pulsar.InitialPosition.Earliest)
                 for kind in CONSUMERS]
    for consumer in consumers:
        assert _receive(consumer, 1) == [b"plain"]  # once the timeout aborted the transaction
        assert _drain(consumer) == []
    assert wait_for(lambda: "timed out: aborted" in broker.log())
    raw = RawClient(broker.url)  # a commit now, from anyone, finds nothing to commit
    try:
        raw.connect()
        most, least = txn.txn_id
        raw.command(pb.BaseCommand(type=pb.BaseCommand.END_TXN, endTxn=pb.CommandEndTxn(
            request_id=5, txnid_most_bits=most, txnid_least_bits=least, txn_action=pb.COMMIT)))
        answer = raw.expect(pb.BaseCommand.END_TXN_RESPONSE).endTxnResponse
        assert (answer.request_id, answer.error) == (5, pb.TransactionNotFound)
    finally:
        raw.close()


def test_transactions_refused_clearly_when_the_coordinator_is_off(broker_factory):
    broker = broker_factory("transactionCoordinatorEnabled=false")
    with magnetar.client.Client(broker.url, enable_transaction=True, operation_timeout_seconds=5) as client, \
            pytest.raises(magnetar.client.errors.TransactionCoordinatorNotFoundError):
        client.new_transaction(timeout=5)
    raw = RawClient(broker.url)
    try:
        raw.connect()
        raw.command(pb.BaseCommand(type=pb.BaseCommand.NEW_TXN,
                                   newTxn=pb.CommandNewTxn(request_id=1, txn_ttl_seconds=10)))
        answer = raw.expect(pb.BaseCommand.NEW_TXN_RESPONSE)
        assert answer.newTxnResponse.error == pb.TransactionCoordinatorNotFound
        assert "transactionCoordinatorEnabled" in answer.newTxnResponse.message
        raw.create_producer(_topic("off"))
        raw.write(_txn_send(0, 1, (0, 1), (0, 1)))
        error = raw.expect(pb.BaseCommand.SEND_ERROR)
        assert error.send_error.error == pb.TransactionCoordinatorNotFound
    finally:
        raw.close()


def _txn_send(producer_id: int, sequence_id: int, send_txn: tuple[int, int],
              metadata_txn: tuple[int, int] | None) -> bytes:
    metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
    if metadata_txn is not None:
        metadata.txnid_most_bits, metadata.txnid_least_bits = metadata_txn
    send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id, txnid_most_bits=send_txn[0],
                          txnid_least_bits=send_txn[1])
    return encode_payload_command(pb.BaseCommand(type=pb.BaseCommand.SEND, send=send),
                                  build_entry(metadata, b"x"))


def test_hostile_transactional_sends_are_refused(txn_broker, clients):
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    txn = producing.new_transaction(timeout=30)
    most, least = txn.txn_id
    raw = RawClient(txn_broker.url)
    try:
        raw.connect()
        topic = _topic("hostile")
        raw.create_producer(topic)
        cases = [
            ((most, least), None, pb.NotAllowedError),  # the message does not name the transaction
            ((most, least), (most, least + 1), pb.NotAllowedError),  # it names another one
            ((most, least + 10_000), (most, least + 10_000), pb.TransactionNotFound),  # never opened
            ((most + 7, 1), (most + 7, 1), pb.TransactionNotFound),  # another coordinator's
        ]
        for sequence_id, (send_txn, metadata_txn, code) in enumerate(cases):
            raw.write(_txn_send(0, sequence_id, send_txn, metadata_txn))
            error = raw.expect(pb.BaseCommand.SEND_ERROR)
            assert (error.send_error.sequence_id, error.send_error.error) == (sequence_id, code)
        txn.commit()
        raw.write(_txn_send(0, 9, (most, least), (most, least)))  # ended: no more messages
        assert raw.expect(pb.BaseCommand.SEND_ERROR).send_error.error == pb.TransactionNotFound
        raw.ping()  # the connection and the broker are fine
    finally:
        raw.close()
    with pytest.raises(magnetar.client.errors.InvalidTxnStatusError):
        txn.abort()  # the client knows it committed


def test_the_asyncio_client_commits_and_aborts(txn_broker):
    async def run() -> None:
        topic_in, topic_out = _topic("aio-in"), _topic("aio-out")
        async with aio.Client(txn_broker.url, enable_transaction=True, operation_timeout_seconds=10) as client:
            source = await client.create_producer(topic_in)
            await source.send(b"input")
            consumer = await client.subscribe(topic_in, "s", initial_position=pulsar.InitialPosition.Earliest)
            reader = await client.subscribe(topic_out, "check", initial_position=pulsar.InitialPosition.Earliest)
            sink = await client.create_producer(topic_out)
            message = await consumer.receive()
            for commit in (False, True):  # consume-transform-produce, aborted once, then committed
                txn = await client.new_transaction(timeout=30)
                await sink.send(message.data().upper(), txn=txn)
                await consumer.acknowledge(message, txn=txn)
                await (txn.commit() if commit else txn.abort())
                if not commit:
                    message = await consumer.receive()  # given back by the abort
            assert (await reader.receive()).data() == b"INPUT"
            with pytest.raises(TimeoutError):  # nothing of the aborted attempt
                await asyncio.wait_for(reader.receive(), QUIET)
            assert txn.state == "COMMITTED"
        async with aio.Client(txn_broker.url) as plain:
            with pytest.raises(magnetar.client.errors.InvalidConfiguration):
                await plain.new_transaction()

    asyncio.run(run())


@pytest.mark.parametrize("kind", CONSUMERS)
def test_compaction_keeps_no_aborted_message_and_stops_at_an_open_transaction(txn_broker, clients, kind):
    name = f"txn-compact-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    producer = producing.create_producer(topic)
    consuming = clients(kind, txn_broker.url)
    consuming.subscribe(topic, "keep")  # retention 0: a subscription keeps the entries for the readers
    committed = producing.new_transaction(timeout=30)
    producer.send(b"k1-committed", partition_key="k1", txn=committed)
    committed.commit()
    aborted = producing.new_transaction(timeout=30)
    producer.send(b"k1-aborted", partition_key="k1", txn=aborted)
    producer.send(b"k9-aborted", partition_key="k9", txn=aborted)
    aborted.abort()
    still_open = producing.new_transaction(timeout=30)
    producer.send(b"k2-open", partition_key="k2", txn=still_open)
    producer.send(b"k3-plain", partition_key="k3")
    assert compact(txn_broker.admin_url, name)["status"] == "SUCCESS"

    def read_compacted() -> list[bytes]:
        reader = consuming.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(10_000).data())
        reader.close()
        return got

    assert read_compacted() == [b"k1-committed"]
    still_open.commit()
    assert compact(txn_broker.admin_url, name)["status"] == "SUCCESS"
    assert read_compacted() == [b"k1-committed", b"k2-open", b"k3-plain"]


@pytest.mark.parametrize("kind", CONSUMERS)
def test_a_partitioned_topic_commits_and_aborts_across_its_partitions(txn_broker, clients, kind):
    name = f"txn-parts-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{name}"
    status, _, body = http("PUT", f"{topic_path(txn_broker.admin_url, name)}/partitions", b"3")
    assert status == 204, body
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    producer = producing.create_producer(topic)
    consumer = clients(kind, txn_broker.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    kept, dropped = producing.new_transaction(timeout=30), producing.new_transaction(timeout=30)
    for i in range(6):  # keys spread them over the partitions
        producer.send(f"kept-{i}".encode(), partition_key=f"k{i}", txn=kept)
        producer.send(f"dropped-{i}".encode(), partition_key=f"k{i}", txn=dropped)
    assert _drain(consumer) == []
    dropped.abort()
    kept.commit()
    assert sorted(_receive(consumer, 6) + _drain(consumer)) == sorted(f"kept-{i}".encode() for i in range(6))


def test_acks_held_at_a_crash_stay_held_until_the_transaction_times_out(own_broker, clients):
    broker = own_broker
    topic = _topic("ack-crash")
    # long enough for a restart on a loaded machine to finish inside it
    consumer, _ = _ack_first_in_txn(clients, broker.url, topic, [b"held"], timeout=8)
    consumer.close()
    broker.kill()
    broker.start()
    again = clients("official", broker.url).subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    assert _drain(again) == []  # still held by the open transaction, after the crash too
    assert _receive(again, 1) == [b"held"]  # given back when it timed out


def test_a_subscription_made_again_holds_nothing_of_the_one_deleted(txn_broker, clients):
    topic = _topic("ack-unsub")
    txn_client = clients("magnetar", txn_broker.url, enable_transaction=True)
    txn_client.create_producer(topic).send(b"m0")
    consumer = txn_client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    txn = txn_client.new_transaction(timeout=30)
    consumer.acknowledge(consumer.receive(10_000), txn=txn)
    consumer.unsubscribe()
    again = clients("official", txn_broker.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert _receive(again, 1) == [b"m0"]


def _inbound(broker: Standalone, topic: str) -> tuple[int, int, float | None]:
    """(msgInCounter, bytesInCounter) of the topic's stats, and its pulsar_in_messages_total."""
    path = topic.removeprefix("persistent://")
    status, _, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/{path}/stats")
    assert status == 200, body
    stats = json.loads(body)
    _, _, page = http("GET", f"{broker.admin_url}/metrics")
    found = re.search(rf'^pulsar_in_messages_total{{[^}}]*topic="{re.escape(topic)}"[^}}]*}} (\S+)$',
                      page.decode(), re.MULTILINE)
    return stats["msgInCounter"], stats["bytesInCounter"], float(found.group(1)) if found else None


@pytest.mark.parametrize("kind", CONSUMERS)
def test_commit_and_abort_markers_are_not_counted_as_published_messages(txn_broker, clients, kind):
    """Pulsar counts what producers send: a transaction's end stores a marker entry, which
    moves neither msgInCounter, bytesInCounter nor /metrics' pulsar_in_messages_total."""
    topic = _topic("counted")
    plain = random.randint(1, 10)
    producer = clients(kind, txn_broker.url).create_producer(topic)
    for i in range(plain):
        producer.send_async(f"plain-{i}".encode(), None)
    producer.flush()
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    transactional = producing.create_producer(topic)
    published = plain
    for end in random.sample(["commit", "abort"] * 2, 4):
        txn = producing.new_transaction(timeout=30)
        count = random.randint(1, 20)
        for i in range(count):
            transactional.send(f"{end}-{i}".encode(), txn=txn)
        published += count  # an aborted transaction's messages were published all the same
        before = _inbound(txn_broker, topic)
        assert before[0] == before[2] == published
        getattr(txn, end)()
        assert _inbound(txn_broker, topic) == before, end


@pytest.mark.parametrize("in_txn", [True, False], ids=["transactional", "plain"])
def test_an_ack_for_a_closed_consumer_is_refused_not_answered_ok(txn_broker, in_txn):
    """An ACK asking for an answer that reaches the broker after its consumer closed holds
    nothing: answered ConsumerNotFound (a success would let a transaction commit an
    acknowledgement nothing holds)."""
    raw = RawClient(txn_broker.url)
    try:
        raw.connect()
        txn = {"txnid_most_bits": 0, "txnid_least_bits": 1} if in_txn else {}
        raw.command(pb.BaseCommand(type=pb.BaseCommand.ACK, ack=pb.CommandAck(
            consumer_id=77, ack_type=pb.CommandAck.Individual, request_id=9,
            message_id=[pb.MessageIdData(ledgerId=1, entryId=2)], **txn)))
        answer = raw.expect(pb.BaseCommand.ACK_RESPONSE).ackResponse
        assert (answer.request_id, answer.error) == (9, pb.ConsumerNotFound) and "77" in answer.message
        raw.ping()  # the connection carries on
    finally:
        raw.close()


@pytest.mark.parametrize("kind", CONSUMERS)
def test_a_transactional_message_sent_again_is_deduplicated(txn_broker, clients, kind):
    """With deduplication on, a SEND in a transaction repeated with its sequence id (a client
    sending again after a lost receipt) is answered and not stored again, as in Pulsar: the
    commit publishes it once."""
    producing = clients("magnetar", txn_broker.url, enable_transaction=True)
    topic = _topic("dedup")
    consumer = clients(kind, txn_broker.url).subscribe(topic, "s")
    txn = producing.new_transaction(timeout=30)
    producing.create_producer(topic).send(b"first", txn=txn)  # the partition joins the transaction
    status, _, answer = http("POST", f"{txn_broker.admin_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}"
                                     f"/deduplicationEnabled", b"true")
    assert status in (200, 204), answer
    most, least = txn.txn_id
    raw = RawClient(txn_broker.url)
    try:
        raw.connect()
        raw.create_producer(topic)
        for _ in range(3):  # the same message three times
            raw.write(_txn_send(0, 5, (most, least), (most, least)))
            receipt = raw.expect(pb.BaseCommand.SEND_RECEIPT).send_receipt
            assert receipt.sequence_id == 5
    finally:
        raw.close()
    txn.commit()
    assert sorted(_receive(consumer, 2)) == [b"first", b"x"]
    assert _drain(consumer) == []
