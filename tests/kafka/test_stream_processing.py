"""A stream-processing library on librdkafka: quixstreams, run with its defaults (it creates its
changelog topic, compacted, copying the input topic's retention), keeps running sums per key
in its RocksDB state store; a restart on an empty state directory restores that state from the
changelog, read compacted after the broker compacted it. The sums are checked exactly, on both
entry formats. In exactly-once mode (Kafka transactions, issue 47) the sums stay exact through
SIGKILLs of the processor and of the broker."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict

import pytest
from admin_http import http
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka_brokers import start_kafka_broker
from polling import wait_for

quixstreams = pytest.importorskip("quixstreams")
NAMESPACE = "public/default"


def _send(bootstrap: str, topic: str, records: list[tuple[str, int]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, amount in records:
        producer.produce(topic, key=key.encode(), value=json.dumps(amount).encode())
    assert producer.flush(30) == 0


def _run(bootstrap: str, group: str, source: str, state_dir: str, outputs: int) -> list[dict]:
    """One run of the processor until it has emitted `outputs` running sums."""
    app = quixstreams.Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                                  state_dir=state_dir)
    sdf = app.dataframe(app.topic(source))

    def running_sum(amount: int, key: bytes, _timestamp: int, _headers: object, state) -> dict:
        total = state.get("sum", 0) + amount
        state.set("sum", total)
        return {"key": key.decode(), "sum": total}

    sdf = sdf.apply(running_sum, stateful=True, metadata=True)
    return app.run(count=outputs, timeout=60)


def _compact_changelog(broker, admin: AdminClient) -> str:
    """Compact every partition of the processor's changelog topic (admin API) and wait."""
    (changelog,) = [name for name in admin.list_topics(timeout=10).topics if name.startswith("changelog__")]
    partitions = len(admin.list_topics(changelog, timeout=10).topics[changelog].partitions)
    for partition in range(partitions):
        path = f"{broker.admin_url}/admin/v2/persistent/{NAMESPACE}/{changelog}-partition-{partition}/compaction"
        assert http("PUT", path)[0] in (200, 204)
        assert wait_for(lambda path=path: json.loads(http("GET", path)[2])["status"] == "SUCCESS", timeout=30)
    return changelog


def _expected(before: dict[str, int], records: list[tuple[str, int]]) -> dict[str, list[int]]:
    sums, out = dict(before), defaultdict(list)
    for key, amount in records:
        sums[key] = sums.get(key, 0) + amount
        out[key].append(sums[key])
    return dict(out)


def _by_key(outputs: list[dict]) -> dict[str, list[int]]:
    out = defaultdict(list)
    for value in outputs:
        out[value["key"]].append(value["sum"])
    return dict(out)


def test_running_sums_survive_a_restart_from_the_compacted_changelog(kafka_broker, tmp_path) -> None:
    rng = random.Random()
    bootstrap = kafka_broker.bootstrap
    source, group = f"amounts-{uuid.uuid4().hex[:6]}", f"sums-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(source, 3)])[source].result(timeout=30)
    keys = [f"account-{i}" for i in range(rng.randint(5, 15))]
    first: list[tuple[str, int]] = []
    for _ in range(2):  # two runs, two checkpoints: every key changes twice in the changelog
        batch = [(key, rng.randint(-50, 100)) for key in keys] + \
            [(rng.choice(keys), rng.randint(-50, 100)) for _ in range(rng.randint(50, 150))]
        _send(bootstrap, source, batch)
        before = {key: sums[-1] for key, sums in _expected({}, first).items()}
        assert _by_key(_run(bootstrap, group, source, str(tmp_path / "state-1"), len(batch))) == \
            _expected(before, batch)
        first += batch
    changelog = _compact_changelog(kafka_broker, admin)
    (described,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, changelog)]).values()
    configs = described.result(timeout=30)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)  # copied from the source topic
    second = [(rng.choice(keys), rng.randint(-50, 100)) for _ in range(rng.randint(20, 80))]
    _send(bootstrap, source, second)
    totals = {key: sums[-1] for key, sums in _expected({}, first).items()}
    # a new state directory: the processor restores every sum from the changelog before going on
    assert _by_key(_run(bootstrap, group, source, str(tmp_path / "state-2"), len(second))) == \
        _expected(totals, second)


_EXACTLY_ONCE_PROCESSOR = """
import sys
import quixstreams
bootstrap, group, source, sink, state_dir, transactional_id = sys.argv[1:7]
app = quixstreams.Application(
    broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest", state_dir=state_dir,
    processing_guarantee="exactly-once", commit_interval=0.3,
    producer_extra_config={"transactional.id": transactional_id, "transaction.timeout.ms": 15000})
sdf = app.dataframe(app.topic(source))

def running_sum(amount, key, _timestamp, _headers, state):
    total = state.get("sum", 0) + amount
    state.set("sum", total)
    return {"key": key.decode(), "sum": total}

sdf.apply(running_sum, stateful=True, metadata=True).to_topic(app.topic(sink, value_serializer="json"))
app.run()
"""


def _committed_outputs(bootstrap: str, sink: str, partitions: int) -> list[dict]:
    """Every record of the sink a read_committed consumer reads now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(sink, p, 0) for p in range(partitions)])
    ends = {p: consumer.get_watermark_offsets(TopicPartition(sink, p), timeout=10)[1] for p in range(partitions)}
    out: list[dict] = []
    try:
        while any(consumer.position([TopicPartition(sink, p)])[0].offset < end for p, end in ends.items() if end):
            out += [json.loads(m.value()) for m in consumer.consume(1000, 1) if not m.error()]
    finally:
        consumer.close()
    return out


def test_exactly_once_running_sums_through_processor_and_broker_kills(tmp_path) -> None:
    """quixstreams with processing_guarantee="exactly-once" (one Kafka transaction per checkpoint:
    output records, changelog and input offsets) keeps running sums per key. The processor is
    SIGKILLed and restarted (a new producer with the same transactional id fences the old and
    aborts its open transaction), then the broker is SIGKILLed and restarted under it. The output
    a read_committed consumer sees holds every sum exactly once, in order."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    broker = start_kafka_broker(tmp_path / "data", "transactionCoordinatorEnabled=true")
    source, sink, group = (f"{name}-{uuid.uuid4().hex[:6]}" for name in ("amounts", "sums", "eos"))
    processors: list[subprocess.Popen] = []

    def processor() -> subprocess.Popen:
        started = subprocess.Popen([sys.executable, "-c", _EXACTLY_ONCE_PROCESSOR, broker.bootstrap, group, source,
                                    sink, str(tmp_path / "state"), f"tx-{group}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processors.append(started)
        return started

    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(source, 2), NewTopic(sink, 2)])[source].result(timeout=30)
        keys = [f"account-{i}" for i in range(8)]
        records = [(rng.choice(keys), rng.randint(-50, 100)) for _ in range(240)]
        _send(broker.bootstrap, source, records[:100])
        running = processor()
        assert wait_for(lambda: len(_committed_outputs(broker.bootstrap, sink, 2)) == 100, timeout=60,
                        interval=0.2), f"seed {seed}"
        # SIGKILLs at random moments of a checkpoint's work (commit_interval 0.3 s), its transaction
        # open: the point of the test, not waits
        _send(broker.bootstrap, source, records[100:160])
        time.sleep(rng.uniform(0.05, 0.3))
        running.send_signal(signal.SIGKILL)
        running.wait()
        running = processor()
        _send(broker.bootstrap, source, records[160:200])
        time.sleep(rng.uniform(0.05, 0.5))
        broker.kill()
        broker.start()
        _send(broker.bootstrap, source, records[200:])
        expected = _expected({}, records)
        assert wait_for(lambda: len(_committed_outputs(broker.bootstrap, sink, 2)) >= len(records), timeout=90,
                        interval=0.5), f"seed {seed}"
        assert _by_key(_committed_outputs(broker.bootstrap, sink, 2)) == expected, f"seed {seed}"
    finally:
        for started in processors:
            started.kill()
            started.wait()
        broker.stop()
