"""A stream-processing library on librdkafka: quixstreams, run with its defaults (it creates its
changelog topic, compacted, copying the input topic's retention), keeps running sums per key
in its RocksDB state store; a restart on an empty state directory restores that state from the
changelog, read compacted after the broker compacted it. The sums are checked exactly, on both
entry formats."""

from __future__ import annotations

import json
import random
import uuid
from collections import defaultdict

import pytest
from admin_http import http
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
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
