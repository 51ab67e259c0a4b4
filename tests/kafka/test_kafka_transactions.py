"""Issue 47: Kafka transactions (transactional.id) are Pulsar transactions on the broker's coordinator.

Real clients: confluent-kafka's (librdkafka) transactional producer with send_offsets_to_transaction
and read_committed consumers, aiokafka's and kafkajs's transactions; Pulsar consumers of the same
topics (the official client and magnetar.client) never see an aborted Kafka record. Fencing by a
new producer with the same id, a dead producer's transaction aborted at its timeout, a broker
killed (SIGKILL) in the middle of commits.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace

import pulsar
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka_brokers import KafkaStandalone, RawKafka, batch, produce_request, start_kafka_broker
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.describe_transactions.v0 import request as describe_transactions
from kio.schema.end_txn.v3 import request as end_txn
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.list_transactions.v1 import request as list_transactions
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit
from racing_clients import INSTALL_KAFKAJS, JS

import magnetar.client
from magnetar.storage import SqliteMetadataStore

PULSAR_NAMESPACE = "persistent://public/default/"
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


@pytest.fixture(scope="module")
def broker(txn_broker: KafkaStandalone) -> KafkaStandalone:
    return txn_broker


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _producer(broker: KafkaStandalone, transactional_id: str, **config: object) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5, **config})
    producer.init_transactions(20)
    return producer


def _in_transaction(broker: KafkaStandalone, transactional_id: str, topic: str, value: bytes, *,
                    commit: bool = False) -> Producer:
    """A transactional producer that has sent `value` (stored) in a transaction it leaves open
    unless `commit`."""
    producer = _producer(broker, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, value)
    if commit:
        producer.commit_transaction(10)
    else:
        producer.flush(10)
    return producer


def _init(raw: RawKafka, transactional_id: str, *, attempts: int = 50) -> object:
    """InitProducerId for `transactional_id`, retried while the coordinator recovers."""
    for _ in range(attempts):
        answer = raw.call(22, 4, init_producer_id.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))
        if answer.error_code != ErrorCode.coordinator_load_in_progress:
            break
        time.sleep(0.1)  # the client's retry backoff
    assert answer.error_code == ErrorCode.none
    return answer


def _raw_transactional_batch(producer: tuple[int, int], sequence: int, values: list[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=producer[0],
                                        producer_epoch=producer[1], base_sequence=sequence, batch_size=1 << 20)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def _latest(raw: RawKafka, topic: str, isolation: int) -> int:
    """Partition 0's latest offset, as ListOffsets answers it at `isolation`."""
    request = list_offsets.ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=(
        list_offsets.ListOffsetsTopic(name=topic, partitions=(
            list_offsets.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),))
    return raw.call(2, 7, request).topics[0].partitions[0].offset


def read_committed(broker: KafkaStandalone, topic: str, expected: int, *, isolation: str = "read_committed",
                   timeout: float = 20.0) -> list[bytes]:
    """Partition 0's values from the start: `expected` of them, then half a second more to catch extras."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("reader"),
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5 if len(got) >= expected else 1.0)
            if message is None:
                if len(got) >= expected:
                    break
                continue
            if not message.error():
                got.append(message.value())
    finally:
        consumer.close()
    return got


def pulsar_values(broker: KafkaStandalone, topic: str, expected: int) -> dict[str, list[bytes]]:
    """What a Pulsar reader of partition 0 gets, with each client (both see the same)."""
    name = f"{PULSAR_NAMESPACE}{topic}-partition-0"
    seen: dict[str, list[bytes]] = {}
    for label, module in (("pulsar-client", pulsar), ("magnetar.client", magnetar.client)):
        client = module.Client(broker.url)
        try:
            reader = client.create_reader(name, module.MessageId.earliest)
            values = []
            while reader.has_message_available() and len(values) <= expected:
                values.append(reader.read_next(10_000).data())
            seen[label] = values
        finally:
            client.close()
    return seen


def test_consume_transform_produce_exactly_once_with_random_aborts(broker: KafkaStandalone) -> None:
    """librdkafka's exactly-once loop: a read_committed consumer, a transactional producer that
    sends the consumer's offsets in each transaction; a random half of the transactions abort and
    are redone. The output holds every input once, in order, for Kafka and Pulsar readers alike,
    and the group's offset moves only with commits."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    source, sink, group = _name("in"), _name("out"), _name("job")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(60):
        plain.produce(source, f"v{i}".encode())
    assert plain.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(source, 0)])
    producer = _producer(broker, _name("eos"))
    done, aborts = 0, 0
    try:
        while done < 60:
            messages = [m for m in consumer.consume(rng.randint(1, 9), 1) if not m.error()]
            if not messages:
                continue
            producer.begin_transaction()
            for message in messages:
                producer.produce(sink, message.value().upper())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 10)
            if rng.random() < 0.5:
                producer.abort_transaction(10)
                aborts += 1
                committed = consumer.committed([TopicPartition(source, 0)], 10)[0].offset
                assert committed == (done if done else -1001), f"seed {seed}: an aborted offset reached the group"
                consumer.seek(TopicPartition(source, 0, done))
                continue
            producer.commit_transaction(10)
            done += len(messages)
            assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == done, f"seed {seed}"
    finally:
        consumer.close()
    expected = [f"V{i}".encode() for i in range(60)]
    assert aborts, f"seed {seed}: no transaction aborted"
    assert read_committed(broker, sink, 60) == expected, f"seed {seed}"
    assert pulsar_values(broker, sink, 60) == {"pulsar-client": expected, "magnetar.client": expected}, \
        f"seed {seed}"


def test_open_transaction_holds_readers_back_until_it_ends(broker: KafkaStandalone) -> None:
    """Nothing of a transaction still open is read, nor anything after it (the last stable offset,
    which ListOffsets latest answers); its commit lets both through."""
    topic = _name("lso")
    producer = _in_transaction(broker, _name("open"), topic, b"in-txn")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"after")
    plain.flush(10)
    raw = RawKafka(broker.bootstrap)
    try:
        assert (_latest(raw, topic, READ_COMMITTED), _latest(raw, topic, READ_UNCOMMITTED)) == (0, 2)
        assert read_committed(broker, topic, 1, timeout=2) == []
        producer.commit_transaction(10)
        deadline = time.monotonic() + 10  # answered once decided: the marker follows, as in Kafka
        while (latest := _latest(raw, topic, READ_COMMITTED)) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert latest == 3  # two records and the commit marker
    finally:
        raw.close()
    assert read_committed(broker, topic, 2) == [b"in-txn", b"after"]


def test_a_new_producer_with_the_same_id_fences_the_old_one(broker: KafkaStandalone) -> None:
    topic, transactional_id = _name("fence"), _name("id")
    zombie = _in_transaction(broker, transactional_id, topic, b"zombie")
    _in_transaction(broker, transactional_id, topic, b"successor", commit=True)  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(10)
    assert refused.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                            KafkaError.INVALID_PRODUCER_EPOCH)
    assert read_committed(broker, topic, 1) == [b"successor"]


_DEAD_PRODUCER = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
                     "transaction.timeout.ms": 3000})
producer.init_transactions(20)
producer.begin_transaction()
producer.produce(sys.argv[3], b"never")
producer.flush(10)
print("open", flush=True)
time.sleep(60)
"""


def test_a_dead_producers_transaction_aborts_at_its_timeout(broker: KafkaStandalone) -> None:
    """The producer is SIGKILLed with its transaction open: readers are held back until the
    coordinator aborts it at transaction.timeout.ms, then read past it, without its record."""
    topic, transactional_id = _name("dead"), _name("dead")
    child = subprocess.Popen([sys.executable, "-c", _DEAD_PRODUCER, broker.bootstrap, transactional_id, topic],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "open"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"after")
    plain.flush(10)
    assert read_committed(broker, topic, 1, timeout=30) == [b"after"]
    raw = RawKafka(broker.bootstrap)
    try:
        (state,) = raw.call(65, 0, describe_transactions.DescribeTransactionsRequest(
            transactional_ids=(transactional_id,))).transaction_states
        assert (state.error_code, state.transaction_state) == (ErrorCode.none, "CompleteAbort")
    finally:
        raw.close()
    # the id is usable again: its next producer gets a newer epoch
    _in_transaction(broker, transactional_id, topic, b"next", commit=True)
    assert read_committed(broker, topic, 2) == [b"after", b"next"]


def test_describe_and_list_transactions(broker: KafkaStandalone) -> None:
    topic, transactional_id = _name("describe"), _name("described")
    producer = _in_transaction(broker, transactional_id, topic, b"x")
    raw = RawKafka(broker.bootstrap)
    try:
        (state, unknown) = raw.call(65, 0, describe_transactions.DescribeTransactionsRequest(
            transactional_ids=(transactional_id, "no-such-id"))).transaction_states
        assert (state.error_code, state.transaction_state) == (ErrorCode.none, "Ongoing")
        assert [(t.topic, t.partitions) for t in state.topics] == [(topic, (0,))]
        assert unknown.error_code == ErrorCode.transactional_id_not_found
        listed = raw.call(66, 1, list_transactions.ListTransactionsRequest(
            state_filters=("Ongoing", "Bogus"), producer_id_filters=(), duration_filter=-1))
        assert transactional_id in {t.transactional_id for t in listed.transaction_states}
        assert listed.unknown_state_filters == ("Bogus",)
        producer.commit_transaction(10)
        listed = raw.call(66, 1, list_transactions.ListTransactionsRequest(
            state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1))
        assert transactional_id not in {t.transactional_id for t in listed.transaction_states}
        (state,) = raw.call(65, 0, describe_transactions.DescribeTransactionsRequest(
            transactional_ids=(transactional_id,))).transaction_states
        assert (state.transaction_state, state.topics) == ("CompleteCommit", ())
    finally:
        raw.close()


def test_transactional_records_outside_a_transaction_are_refused(broker: KafkaStandalone) -> None:
    """A raw client's transactional batch with no transaction (or a partition never added) is
    INVALID_PRODUCER_ID_MAPPING / INVALID_TXN_STATE and stores nothing."""
    topic = _name("raw")
    raw = RawKafka(broker.bootstrap)
    try:
        raw.create_topic(topic)
        request = produce_request(topic, _raw_transactional_batch((123456, 0), 0, [b"sneaky"]))
        for transactional_id in (None, "nobody"):
            (answer,) = raw.call(0, 9, replace(request, transactional_id=transactional_id)).responses
            assert answer.partition_responses[0].error_code in (ErrorCode.invalid_txn_state,
                                                                 ErrorCode.invalid_producer_id_mapping)
        assert raw.produce(topic, batch([b"plain"]))[0] == ErrorCode.none
        assert raw.latest(topic) == 1
        # a hostile AddPartitionsToTxn naming 100,000 partitions is refused before any is looked up
        hostile = _name("hostile")
        ids = _init(raw, hostile)
        added = raw.call(24, 3, add_partitions.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=hostile, v3_and_below_producer_id=ids.producer_id,
            v3_and_below_producer_epoch=ids.producer_epoch,
            v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(name=topic, partitions=tuple(
                range(100_000))),)))
        codes = {p.partition_error_code for p in added.results_by_topic_v3_and_below[0].results_by_partition}
        assert codes == {ErrorCode.invalid_request}
    finally:
        raw.close()
    assert read_committed(broker, topic, 1, isolation="read_uncommitted") == [b"plain"]


def test_kafkajs_transactions(broker: KafkaStandalone) -> None:
    assert (JS / "node_modules" / "kafkajs").is_dir(), INSTALL_KAFKAJS
    topic = _name("kafkajs")
    out = subprocess.run(["node", str(JS / "transaction.js"), broker.bootstrap, topic, _name("kjs")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"committed": True, "aborted": True}, out.stderr
    assert read_committed(broker, topic, 2) == [b"commit-1", b"commit-2"]


def _killed_and_restarted(broker: KafkaStandalone, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)  # a random moment of the commit under way: the point of the test, not a wait
        broker.kill()
        broker.start()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_exactly_once_across_broker_kills(tmp_path) -> None:
    """The broker is SIGKILLed at random moments of commits and restarted on its port; the
    pipeline redoes what its group's committed offset says is not done. The output holds
    every input once, in order: a commit the kill cut short is finished after the restart
    (records and offsets together) or was never decided (neither)."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    broker = start_kafka_broker(tmp_path / "data", "transactionCoordinatorEnabled=true")
    try:
        source, sink, group, transactional_id, total = _name("in"), _name("out"), _name("job"), _name("eos"), 40
        plain = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(total):
            plain.produce(source, f"v{i}".encode())
        assert plain.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False,
                             "isolation.level": "read_committed"})
        partition = TopicPartition(source, 0)
        consumer.assign([partition])
        producer = _producer(broker, transactional_id)
        kills = set(rng.sample(range(1, 8), 2))
        rounds = 0
        try:
            while (done := max(consumer.committed([partition], 30)[0].offset, 0)) < total:
                rounds += 1
                assert rounds < 60, f"seed {seed}: no progress"
                consumer.seek(TopicPartition(source, 0, done))
                messages = [m for m in consumer.consume(rng.randint(2, 8), 1) if not m.error()]
                if not messages:
                    continue
                try:
                    producer.begin_transaction()
                    for message in messages:
                        producer.produce(sink, message.value().upper())
                    producer.send_offsets_to_transaction(consumer.position([partition]),
                                                         consumer.consumer_group_metadata(), 30)
                    killer = _killed_and_restarted(broker, rng.uniform(0, 0.02)) if rounds in kills else None
                    try:
                        producer.commit_transaction(30)
                    finally:
                        if killer is not None:
                            killer.join()
                except KafkaException as exc:
                    error = exc.args[0]
                    if error.txn_requires_abort():
                        producer.abort_transaction(30)
                    else:  # fatal (fenced, or the commit's outcome lost): a new producer takes over
                        producer = _producer(broker, transactional_id)
        finally:
            consumer.close()
        expected = [f"V{i}".encode() for i in range(total)]
        assert read_committed(broker, sink, total) == expected, f"seed {seed}, kills at {sorted(kills)}"
        assert pulsar_values(broker, sink, total)["pulsar-client"] == expected, f"seed {seed}"
    finally:
        broker.stop()


def test_aiokafka_transactions_with_offsets(broker: KafkaStandalone) -> None:
    """aiokafka's transaction() and send_offsets_to_transaction: a committed transaction's records
    and offsets, an aborted one's neither."""
    topic, group = _name("aiokafka"), _name("aio-group")
    source = _name("aio-in")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(source, b"input")
    assert plain.flush(10) == 0

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_name("aio"))
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed")
                await producer.send_offsets_to_transaction({AioTopicPartition(source, 0): 1}, group)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aborted")
                    await producer.send_offsets_to_transaction({AioTopicPartition(source, 0): 5}, group)
                    raise RuntimeError("abort")
        finally:
            await producer.stop()

    asyncio.run(run())
    _assert_committed(broker, topic, source, group, [b"committed"], 1)


def test_a_retried_batch_of_an_open_transaction_is_not_stored_twice_after_a_sigkill(tmp_path) -> None:
    """A producer whose answer was lost to a SIGKILL sends its batch again after the restart:
    it is answered with its first offset (the producer state is rebuilt from the entries of the
    transaction still open too, past the last stable offset) and the transaction commits it once."""
    broker = start_kafka_broker(tmp_path / "data", "transactionCoordinatorEnabled=true")
    topic, transactional_id = _name("retry"), _name("retry")
    try:
        raw = RawKafka(broker.bootstrap)
        raw.create_topic(topic)
        ids = _init(raw, transactional_id)
        producer = (ids.producer_id, ids.producer_epoch)
        added = raw.call(24, 3, add_partitions.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
            v3_and_below_producer_epoch=producer[1],
            v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)))
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none
        requests = [produce_request(topic, _raw_transactional_batch(producer, sequence, values))
                    for sequence, values in ((0, [b"a", b"b"]), (2, [b"c", b"d"]))]
        requests = [replace(request, transactional_id=transactional_id) for request in requests]
        assert [raw.call(0, 9, r).responses[0].partition_responses[0].base_offset for r in requests] == [0, 2]
        raw.close()
        broker.kill()
        broker.start()
        raw = RawKafka(broker.bootstrap)
        deadline = time.monotonic() + 10
        while True:  # NOT_ENOUGH_REPLICAS while the coordinator recovers: retried, as clients do
            answer = raw.call(0, 9, requests[1]).responses[0].partition_responses[0]
            if answer.error_code != ErrorCode.not_enough_replicas or time.monotonic() > deadline:
                break
        assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 2)
        ended = raw.call(26, 3, end_txn.EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                                      producer_epoch=producer[1], committed=True))
        assert ended.error_code == ErrorCode.none
        raw.close()
        assert read_committed(broker, topic, 4) == [b"a", b"b", b"c", b"d"]
        broker.kill()
        broker.start()
        raw = RawKafka(broker.bootstrap)
        successor = _init(raw, transactional_id)  # the id's record survived: same producer id, next epoch
        assert (successor.producer_id, successor.producer_epoch) == (producer[0], producer[1] + 1)
        zombie = raw.call(26, 3, end_txn.EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                                       producer_epoch=producer[1], committed=False))
        assert zombie.error_code == ErrorCode.producer_fenced
        raw.close()
    finally:
        broker.stop()


def test_read_uncommitted_reads_to_the_high_watermark(broker: KafkaStandalone) -> None:
    """read_uncommitted gets an open transaction's records and those after it; ListOffsets
    latest answers the high watermark to it and the last stable offset to read_committed."""
    topic = _name("hw")
    producer = _in_transaction(broker, _name("hw"), topic, b"open")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"after")
    plain.flush(10)
    ends = {}
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("hw"),
                             "isolation.level": isolation})
        try:
            ends[isolation] = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        finally:
            consumer.close()
    # the high watermark, and the last stable offset
    assert ends == {"read_uncommitted": 2, "read_committed": 0}
    assert read_committed(broker, topic, 2, isolation="read_uncommitted") == [b"open", b"after"]
    assert read_committed(broker, topic, 1, timeout=2) == []
    producer.abort_transaction(10)
    assert read_committed(broker, topic, 1) == [b"after"]


def test_a_commit_decided_before_a_crash_is_finished_after_the_restart(tmp_path) -> None:
    """The broker dies after EndTxn's decision is written to the id's record and before the
    coordinator hears it (the record is set so while the broker is down, as the crash would
    leave it): the restart commits the transaction, its records and its group offset together."""
    broker = start_kafka_broker(tmp_path / "data", "transactionCoordinatorEnabled=true")
    topic, source, group, transactional_id = _name("decided"), _name("source"), _name("group"), _name("decided")
    try:
        raw = RawKafka(broker.bootstrap)
        _open_with_offset(raw, transactional_id, topic, source, group)
        raw.close()
        broker.kill()
        store = SqliteMetadataStore(broker.data_dir / "metadata.db")
        key = _record_key(transactional_id)
        record = json.loads(store.get(key))
        assert record["status"] == "Ongoing"
        store.put(key, json.dumps({**record, "status": "PrepareCommit"}).encode())
        store.close()
        broker.start()
        _assert_committed(broker, topic, source, group)
    finally:
        broker.stop()


def _record_key(transactional_id: str) -> str:
    return f"/protocol-handlers/state/kafka/transactions/public%2Fdefault/{transactional_id}"


def _open_with_offset(raw: RawKafka, transactional_id: str, topic: str, source: str, group: str) -> tuple[int, int]:
    """A transaction that stored x and y in `topic` and sent `group`'s offset 7 on `source`; its producer."""
    raw.create_topic(topic)
    raw.create_topic(source)
    ids = _init(raw, transactional_id)
    producer = (ids.producer_id, ids.producer_epoch)
    raw.call(24, 3, add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1],
        v3_and_below_topics=(add_partitions.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)))
    request = replace(produce_request(topic, _raw_transactional_batch(producer, 0, [b"x", b"y"])),
                      transactional_id=transactional_id)
    assert raw.call(0, 9, request).responses[0].partition_responses[0].error_code == ErrorCode.none
    assert raw.call(25, 3, add_offsets.AddOffsetsToTxnRequest(
        transactional_id=transactional_id, producer_id=producer[0], producer_epoch=producer[1],
        group_id=group)).error_code == ErrorCode.none
    committed = raw.call(28, 3, txn_offset_commit.TxnOffsetCommitRequest(
        transactional_id=transactional_id, group_id=group, producer_id=producer[0], producer_epoch=producer[1],
        generation_id=-1, member_id="", group_instance_id=None, topics=(
            txn_offset_commit.TxnOffsetCommitRequestTopic(name=source, partitions=(
                txn_offset_commit.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                    committed_metadata="m"),)),)))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    return producer


def _assert_committed(broker: KafkaStandalone, topic: str, source: str, group: str,
                      values: tuple[bytes, ...] | list[bytes] = (b"x", b"y"), offset: int = 7) -> None:
    """`topic` holds `values` for read_committed, and `group` has `offset` on `source`."""
    assert read_committed(broker, topic, len(values)) == list(values)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        assert consumer.committed([TopicPartition(source, 0)], 10)[0].offset == offset
    finally:
        consumer.close()


def test_a_commit_answered_before_its_markers_survives_a_sigkill_at_once(tmp_path) -> None:
    """EndTxn is answered once the decision is durable in the id's record and the coordinator's
    (one commit), the markers written after, as Kafka answers it. Read while the broker runs,
    the store never shows the answer ahead of the decision; a SIGKILL right after the answer
    keeps the records, the offset and the answer to the client's retry."""
    broker = start_kafka_broker(tmp_path / "data", "transactionCoordinatorEnabled=true")
    topic, source, group, transactional_id = _name("answered"), _name("source"), _name("group"), _name("answered")
    try:
        raw = RawKafka(broker.bootstrap)
        producer = _open_with_offset(raw, transactional_id, topic, source, group)
        end = end_txn.EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                    producer_epoch=producer[1], committed=True)
        assert raw.call(26, 3, end).error_code == ErrorCode.none
        store = SqliteMetadataStore(broker.data_dir / "metadata.db", read_only=True)
        record = json.loads(store.get(_record_key(transactional_id)))
        decisions = [json.loads(store.get(key))["status"] for key in store.list("/transactions/coordinator/")
                     if "/txn/" in key]
        store.close()
        broker.kill()
        assert record["status"] in ("PrepareCommit", "CompleteCommit")
        assert set(decisions) <= {"COMMITTING"}  # or ended and deleted already
        raw.close()
        broker.start()
        raw = RawKafka(broker.bootstrap)
        deadline = time.monotonic() + 10
        while (error := raw.call(26, 3, end).error_code) == ErrorCode.coordinator_load_in_progress and \
                time.monotonic() < deadline:
            time.sleep(0.1)  # the client's retry backoff
        assert error == ErrorCode.none  # the retry of a commit that came through
        raw.close()
        _assert_committed(broker, topic, source, group)
    finally:
        broker.stop()


def test_transactions_in_kafka_entry_format(tmp_path) -> None:
    """With entryFormat=kafka the batches are stored as sent, and the transaction buffer still
    decides: a read_committed consumer gets the committed transaction's records only."""
    broker = start_kafka_broker(tmp_path / "data", "transactionCoordinatorEnabled=true", "entryFormat=kafka")
    topic, transactional_id = _name("kafka-format"), _name("kafka-format")
    try:
        _in_transaction(broker, transactional_id, topic, b"kept", commit=True)
        producer = _in_transaction(broker, transactional_id, topic, b"dropped")
        producer.abort_transaction(10)
        assert read_committed(broker, topic, 1) == [b"kept"]
        assert read_committed(broker, topic, 1, isolation="read_uncommitted") == [b"kept"]
    finally:
        broker.stop()
