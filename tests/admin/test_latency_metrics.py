"""/metrics shows the broker's latencies as Pulsar names them, and they follow real traffic:
pulsar_broker_publish_latency (SEND read to receipt written), each topic's
pulsar_storage_write_latency_le_* buckets, the event loop's lag, and Python's collector."""

from __future__ import annotations

import gc
import re
import shutil

import pytest
from polling import wait_for
from test_stats_metrics import metrics, sample

from magnetar.admin.metrics import collector_lines
from magnetar.broker.topics.latency import ENTRY_LATENCY_SUFFIXES, SUMMARY_QUANTILES


def quantiles(text: str) -> dict[float, float]:
    return {float(q): float(v) for q, v in
            re.findall(r'^pulsar_broker_publish_latency\{[^}]*quantile="([\d.]+)"\} (\S+)$', text, re.M)}


def test_publish_and_storage_latency_count_every_message_stored(broker_factory, api):
    broker = broker_factory("statsUpdateFrequencyInSecs=1")
    before = metrics(broker)
    count_before = sample(before, "pulsar_broker_publish_latency_count")
    sum_before = sample(before, "pulsar_broker_publish_latency_sum")
    assert quantiles(before) == {}  # nothing published yet: no made-up figures
    _, make_client = api
    client = make_client(broker.url)
    topic = "persistent://public/default/latency-metrics"
    unbatched = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        unbatched.send(f"one-{i}".encode())
    batched = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(200):
        batched.send_async(f"many-{i}".encode(), None)
    batched.flush()

    text = metrics(broker)
    published = sample(text, "pulsar_broker_publish_latency_count") - count_before
    assert published >= 41  # each unbatched SEND, and at least one batch of the rest
    mean = (sample(text, "pulsar_broker_publish_latency_sum") - sum_before) / published
    figures = quantiles(text)
    assert list(figures) == list(SUMMARY_QUANTILES)
    values = list(figures.values())
    assert values == sorted(values) and values[0] > 0
    assert figures[0.0] <= mean <= figures[1.0]

    def storage_interval() -> str | None:  # an interval that saw writes of this topic
        scraped = metrics(broker)
        return scraped if (sample(scraped, "pulsar_storage_write_latency_count", topic=topic) or 0) > 0 else None

    assert wait_for(storage_interval, timeout=10)
    scraped = storage_interval() or metrics(broker)
    entries = sample(scraped, "pulsar_storage_write_latency_count", topic=topic)
    buckets = [sample(scraped, f"pulsar_storage_write_latency_le_{suffix}", topic=topic)
               for suffix in ENTRY_LATENCY_SUFFIXES]
    if entries:  # the interval may have rolled between the two scrapes
        assert sum(buckets) == entries
        assert 0 < sample(scraped, "pulsar_storage_write_latency_sum", topic=topic) / entries < 1000


def test_a_refused_send_is_no_publish_latency(broker_factory, api):
    """Only stored messages count: a SEND refused (here: too big) adds nothing."""
    broker = broker_factory("maxMessageSize=2048")
    before = sample(metrics(broker), "pulsar_broker_publish_latency_count")
    _, make_client = api
    client = make_client(broker.url)
    producer = client.create_producer("persistent://public/default/latency-refused", batching_enabled=False,
                                      chunking_enabled=False)
    producer.send(b"small")
    with pytest.raises(Exception):  # noqa: B017 (each client names it its own way)
        producer.send(b"x" * 4096)
    assert sample(metrics(broker), "pulsar_broker_publish_latency_count") - before == 1


def test_event_loop_lag_is_probed_while_the_broker_runs(broker):
    first = metrics(broker)
    assert wait_for(lambda: sample(metrics(broker), "magnetar_event_loop_lag_seconds_count")
                    > sample(first, "magnetar_event_loop_lag_seconds_count") + 5)
    text = metrics(broker)
    buckets = [float(v) for v in re.findall(r'^magnetar_event_loop_lag_seconds_bucket\{[^}]*\} (\S+)$', text, re.M)]
    assert buckets == sorted(buckets) and buckets[-1] == sample(text, "magnetar_event_loop_lag_seconds_count")
    assert sample(text, "magnetar_event_loop_lag_max_seconds") >= 0


def test_the_data_directorys_disk_is_measured(broker):
    text = metrics(broker)
    disk = shutil.disk_usage(broker.data_dir)
    assert sample(text, "magnetar_storage_disk_size_bytes", cluster="standalone") == disk.total
    free = sample(text, "magnetar_storage_disk_free_bytes", cluster="standalone")
    assert abs(free - disk.free) < disk.total * 0.02  # other work on the machine writes meanwhile


def test_the_collector_is_counted_by_generation(broker):
    text = metrics(broker)
    for name in ("python_gc_collections_total", "python_gc_objects_collected_total"):
        assert [sample(text, name, generation=str(g)) is not None for g in range(4)] == [True, True, True, False]
    # start-up collects the young and middle generations before it freezes what it built
    assert sample(text, "python_gc_collections_total", generation="1") >= 1


def test_collections_and_what_they_freed_are_counted():
    """Cycles freed by a young collection show in both counters of generation 0."""
    def counted(lines: list[str]) -> dict[str, float]:
        return {name: sample("\n".join(lines), name, generation="0")
                for name in ("python_gc_collections_total", "python_gc_objects_collected_total")}

    gc.collect()
    before = counted(collector_lines('cluster="c"'))
    for _ in range(500):
        ring: list[object] = []
        ring.append(ring)
    del ring
    gc.collect(0)
    after = counted(collector_lines('cluster="c"'))
    assert after["python_gc_collections_total"] == before["python_gc_collections_total"] + 1
    assert after["python_gc_objects_collected_total"] >= before["python_gc_objects_collected_total"] + 500
