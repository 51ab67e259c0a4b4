"""Entry filters (PIP-105) judging batches by batch-level properties (PIP-191), with the
official client consuming and batches built as a batched-filter-properties producer builds them."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import pulsar
import pytest
from admin_http import get_json, http
from plugin_dist import install_entry_points
from rawclient import RawClient
from standalone import Standalone

import magnetar.client
from magnetar.wire.batch import encode_batch
from magnetar.wire.compression import compress
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
EARLIEST = pulsar.InitialPosition.Earliest
PLUGINS = str(Path(__file__).parent)
SELECTOR = "entryFilterNames=selector"
#: The proposal's worked example, as a producer with batched filter properties
#: `region, version` groups it: four batches, batch properties on each.
WORKED_EXAMPLE = [
    ({"region": "eu"}, [("msg1", {"region": "eu"}), ("msg2", {"region": "eu"})]),
    ({"region": "eu", "version": "1"}, [("msg3", {"region": "eu", "version": "1", "tag": "a"}),
                                         ("msg4", {"region": "eu", "version": "1"})]),
    ({"region": "us", "version": "1"}, [("msg5", {"region": "us", "version": "1"})]),
    ({"region": "us", "version": "2"}, [("msg6", {"region": "us", "version": "2"})]),
]


def batch_entry(sequence: int, batch_properties: dict[str, str], messages: list[tuple[str, dict[str, str]]],
                compression: int = pb.NONE, corrupt: bool = False) -> bytes:
    payload = encode_batch([
        (pb.SingleMessageMetadata(properties=[pb.KeyValue(key=k, value=v) for k, v in props.items()],
                                  sequence_id=sequence + i), value.encode())
        for i, (value, props) in enumerate(messages)])
    metadata = pb.MessageMetadata(producer_name="batcher", sequence_id=sequence, publish_time=int(time.time() * 1000),
                                  num_messages_in_batch=len(messages),
                                  properties=[pb.KeyValue(key=k, value=v) for k, v in batch_properties.items()])
    if compression != pb.NONE:
        metadata.compression = compression
        metadata.uncompressed_size = len(payload)
        payload = b"\xff" * len(compress(compression, payload)) if corrupt else compress(compression, payload)
    return build_entry(metadata, payload)


def publish(broker: Standalone, topic: str, batches: list[bytes], counts: list[int]) -> None:
    raw = RawClient(broker.url)
    raw.connect()
    raw.create_producer(topic)
    sequence = 0
    for entry, count in zip(batches, counts, strict=True):
        raw.command(T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=sequence, num_messages=count)),
                    entry)
        assert raw.expect(T.SEND_RECEIPT).send_receipt.sequence_id == sequence
        sequence += count
    raw.close()


def publish_worked_example(broker: Standalone, topic: str, compression: int = pb.NONE) -> None:
    entries, sequence = [], 0
    for batch_properties, messages in WORKED_EXAMPLE:
        entries.append(batch_entry(sequence, batch_properties, messages, compression))
        sequence += len(messages)
    publish(broker, topic, entries, [len(m) for _, m in WORKED_EXAMPLE])


def drain(consumer, timeout_ms: int = 800) -> list[bytes]:
    got = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except (pulsar.Timeout, magnetar.client.Timeout):
            return got
        got.append(msg.data())
        consumer.acknowledge(msg)


def subscription_stats(broker: Standalone, topic: str, subscription: str) -> dict:
    return get_json(f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats")[
        "subscriptions"][subscription]


@pytest.mark.parametrize("compression", [pb.NONE, pb.LZ4, pb.ZSTD], ids=["none", "lz4", "zstd"])
def test_worked_example(broker_factory, client_factory, compression):
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url)
    us2 = client.subscribe("example", "us2", initial_position=EARLIEST,
                           properties={"selector": "region = 'us' AND version = '2'"})
    eu = client.subscribe("example", "eu", initial_position=EARLIEST, properties={"selector": "region = 'eu'"})
    everything = client.subscribe("example", "all", initial_position=EARLIEST)
    publish_worked_example(broker, "example", compression)
    assert drain(us2) == [b"msg6"]
    assert drain(eu) == [b"msg1", b"msg2", b"msg3", b"msg4"]
    assert drain(everything) == [f"msg{i}".encode() for i in range(1, 7)]
    stats = subscription_stats(broker, "example", "us2")
    assert (stats["filterProcessedMsgCount"], stats["filterAcceptedMsgCount"], stats["filterRejectedMsgCount"]) == (
        6, 1, 5)
    assert stats["msgBacklog"] == 0


def test_rejected_batches_are_never_opened(broker_factory, client_factory):
    """Corrupt compressed payloads behind valid metadata: rejected by the selector, so the
    broker acknowledges them unseen; a consumer receiving one could not have decoded it."""
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url)
    consumer = client.subscribe("unopened", "sub", initial_position=EARLIEST, properties={"selector": "ok = 'yes'"})
    entries = [batch_entry(0, {"ok": "no"}, [("bad", {})] * 3, pb.LZ4, corrupt=True),
               batch_entry(3, {"ok": "yes"}, [("good", {})] * 2, pb.LZ4),
               batch_entry(5, {"ok": "no"}, [("bad", {})] * 3, pb.ZSTD, corrupt=True)]
    publish(broker, "unopened", entries, [3, 2, 3])
    assert drain(consumer) == [b"good", b"good"]
    stats = subscription_stats(broker, "unopened", "sub")
    assert stats["filterRejectedMsgCount"] == 6 and stats["msgBacklog"] == 0
    assert stats["msgOutCounter"] == 2


def test_rejection_shrinks_the_backlog_for_good(broker_factory, client_factory):
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url)
    publish_worked_example(broker, "restartable")
    consumer = client.subscribe("restartable", "sub", initial_position=EARLIEST,
                                properties={"selector": "region = 'us'"})
    assert drain(consumer) == [b"msg5", b"msg6"]
    assert subscription_stats(broker, "restartable", "sub")["msgBacklog"] == 0
    client.close()
    broker.restart()
    assert subscription_stats(broker, "restartable", "sub")["msgBacklog"] == 0
    consumer = client_factory(broker.url).subscribe("restartable", "sub")
    assert drain(consumer, 300) == []


@pytest.mark.parametrize("kind", [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Shared,
                                  pulsar.ConsumerType.Failover, pulsar.ConsumerType.KeyShared],
                         ids=["exclusive", "shared", "failover", "key_shared"])
def test_every_subscription_type(broker_factory, client_factory, kind):
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url)
    consumer = client.subscribe("typed", "sub", consumer_type=kind, initial_position=EARLIEST,
                                properties={"selector": "n >= 10 AND n < 20"})
    producer = client.create_producer("typed", batching_enabled=False)
    for n in range(30):
        producer.send(f"{n}".encode(), properties={"n": str(n)}, partition_key=f"k{n % 3}")
    assert sorted(int(m) for m in drain(consumer)) == list(range(10, 20))


def test_reschedule_redelivers_later_without_counting(client_factory, tmp_path):
    broker = Standalone(tmp_path / "data", ["entryFilterNames=filter_plugins:RescheduleOnce",
                                            "dispatcherFilterRescheduledMessageDelay=300"],
                        env={"PYTHONPATH": PLUGINS}).start()
    try:
        client = client_factory(broker.url)
        for kind in (pulsar.ConsumerType.Shared, pulsar.ConsumerType.Exclusive):
            topic = f"rescheduled-{kind}"
            consumer = client.subscribe(topic, "sub", consumer_type=kind)
            producer = client.create_producer(topic, batching_enabled=False)
            sent_at = time.monotonic()
            for n in range(5):
                producer.send(f"{n}".encode())
            got = [consumer.receive(timeout_millis=10_000) for _ in range(5)]
            assert time.monotonic() - sent_at >= 0.3  # nothing before the delay
            assert [m.redelivery_count() for m in got] == [0] * 5
            data = [m.data() for m in got]
            if kind == pulsar.ConsumerType.Exclusive:
                assert data == [b"0", b"1", b"2", b"3", b"4"]  # order kept
            assert sorted(data) == [b"0", b"1", b"2", b"3", b"4"]
            stats = subscription_stats(broker, topic, "sub")
            assert stats["filterRescheduledMsgCount"] >= 1
    finally:
        broker.stop()


def test_raising_filter_accepts_and_logs_once_and_chains(client_factory, tmp_path):
    broker = Standalone(tmp_path / "data", ["entryFilterNames=filter_plugins:Raising,filter_plugins:RejectOdd"],
                        env={"PYTHONPATH": PLUGINS}).start()
    try:
        client = client_factory(broker.url)
        consumer = client.subscribe("chained", "sub")
        producer = client.create_producer("chained", batching_enabled=False)
        for n in range(10):
            producer.send(f"{n}".encode(), properties={"n": str(n)})
        assert sorted(drain(consumer)) == [b"0", b"2", b"4", b"6", b"8"]
        assert broker.log().count("entry filter filter_plugins:Raising failed") == 1
    finally:
        broker.stop()


def test_topic_policy_overrides_namespace_and_broker(client_factory, tmp_path):
    # policies name installed filters only: reject-odd is an entry point of an installed package
    installed = install_entry_points(tmp_path / "site", "filter-plugins", "magnetar.entry_filters",
                                     {"reject-odd": "filter_plugins:RejectOdd"})
    broker = Standalone(tmp_path / "data", ["entryFilterNames=filter_plugins:RejectAll",
                                            "allowOverrideEntryFilters=true"],
                        env={"PYTHONPATH": os.pathsep.join((PLUGINS, str(installed)))}).start()
    try:
        base = f"{broker.admin_url}/admin/v2"
        client = client_factory(broker.url)
        names = {"broker": "by-broker", "namespace": "by-namespace", "topic": "by-topic"}
        consumers = {level: client.subscribe(topic, "sub") for level, topic in names.items()}
        assert http("POST", f"{base}/namespaces/public/default/entryFilters",
                    json.dumps({"entryFilterNames": "reject-odd"}).encode())[0] == 204
        assert http("POST", f"{base}/persistent/public/default/by-topic/entryFilters",
                    json.dumps({"entryFilterNames": ""}).encode())[0] == 204
        assert http("POST", f"{base}/persistent/public/default/by-topic/entryFilters",
                    json.dumps({"entryFilterNames": "nope"}).encode())[0] == 412
        for topic in names.values():
            producer = client.create_producer(topic, batching_enabled=False)
            for n in range(4):
                producer.send(f"{n}".encode(), properties={"n": str(n)})
        assert sorted(drain(consumers["topic"])) == [b"0", b"1", b"2", b"3"]  # topic: no filters
        assert sorted(drain(consumers["namespace"])) == [b"0", b"2"]
        # The namespace policy covers by-broker too: it is in the same namespace.
        assert sorted(drain(consumers["broker"])) == [b"0", b"2"]
    finally:
        broker.stop()


def test_a_selector_that_does_not_parse_fails_the_subscribe(broker_factory, client_factory):
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url, operation_timeout_seconds=5)
    with pytest.raises(pulsar.PulsarException):
        client.subscribe("bad-selector", "sub", properties={"selector": "region = = 'eu'"})
    assert "does not parse at line 1, column" in broker.log()


def test_a_filter_rejecting_almost_everything_never_stalls(broker_factory, client_factory):
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url)
    # UNKNOWN OR FALSE for all but the needle: unknown must count as no, not as yes.
    consumer = client.subscribe("needle", "sub", receiver_queue_size=10,
                                properties={"selector": "missing = 1 OR n = '19999'"})
    # Unbatched: the official client keeps a batch's properties in each message, not in the
    # batch's MessageMetadata, so a selector on batches of it sees no properties at all.
    producer = client.create_producer("needle", batching_enabled=False, block_if_queue_full=True)
    for n in range(20_000):
        producer.send_async(f"{n}".encode(), None, properties={"n": str(n)})
    producer.flush()
    assert drain(consumer, 10_000) == [b"19999"]  # the needle, and nothing of the haystack
    assert subscription_stats(broker, "needle", "sub")["msgBacklog"] == 0


def test_subscription_properties_from_the_admin_api(broker_factory, client_factory):
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url)
    client.subscribe("admin-selector", "sub").close()
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/admin-selector/subscription/sub/properties"
    assert http("PUT", url, json.dumps({"selector": "region = = 'x'"}).encode())[0] == 409
    assert http("PUT", url, json.dumps({"selector": "n = '2'"}).encode())[0] == 204
    assert get_json(url) == {"selector": "n = '2'"}
    producer = client.create_producer("admin-selector", batching_enabled=False)
    for n in range(4):
        producer.send(f"{n}".encode(), properties={"n": str(n)})
    consumer = client.subscribe("admin-selector", "sub")
    assert drain(consumer) == [b"2"]


def test_delayed_messages_are_judged_when_due(broker_factory, client_factory):
    broker = broker_factory(SELECTOR)
    client = client_factory(broker.url)
    consumer = client.subscribe("delayed-filtered", "sub", consumer_type=pulsar.ConsumerType.Shared,
                                properties={"selector": "keep = 'yes'"})
    producer = client.create_producer("delayed-filtered", batching_enabled=False)
    sent_at = time.monotonic()
    for n in range(6):
        producer.send(f"{n}".encode(), properties={"keep": "yes" if n % 2 else "no"},
                      deliver_after=timedelta(milliseconds=300))
    assert sorted(drain(consumer, 1500)) == [b"1", b"3", b"5"]
    assert time.monotonic() - sent_at >= 0.3
    assert subscription_stats(broker, "delayed-filtered", "sub")["msgBacklog"] == 0


@pytest.mark.parametrize("consumer_api", ["official", "magnetar"])
def test_worked_example_from_a_magnetar_producer(broker_factory, client_factory, consumer_api):
    """Both halves of PIP-191 together: magnetar.client groups the default-batched LZ4 sends
    by `region, version`, and the selector judges the batches it built, for consumers of
    either client."""
    broker = broker_factory(SELECTOR)
    producer_client = magnetar.client.Client(broker.url, operation_timeout_seconds=10)
    consumer_client = (client_factory(broker.url) if consumer_api == "official"
                       else magnetar.client.Client(broker.url, operation_timeout_seconds=10))
    try:
        consumers = {name: consumer_client.subscribe("grouped", name, initial_position=EARLIEST,
                                                     properties={"selector": selector} if selector else {})
                     for name, selector in [("us2", "region = 'us' AND version = '2'"),
                                            ("eu", "region = 'eu'"), ("all", "")]}
        producer = producer_client.create_producer(
            "grouped", batching_enabled=True, batching_max_publish_delay_ms=200,
            compression_type=magnetar.client.CompressionType.LZ4, batched_filter_properties=["region", "version"])
        receipts: list[object] = []
        for (_, messages) in WORKED_EXAMPLE:
            for value, properties in messages:
                producer.send_async(value.encode(), lambda result, _id: receipts.append(result),
                                    properties=properties)
        producer.flush()
        assert receipts == [magnetar.client.Result.Ok] * 6
        assert drain(consumers["us2"]) == [b"msg6"]
        assert drain(consumers["eu"]) == [b"msg1", b"msg2", b"msg3", b"msg4"]
        assert drain(consumers["all"]) == [f"msg{i}".encode() for i in range(1, 7)]
        stats = subscription_stats(broker, "grouped", "eu")
        assert (stats["filterAcceptedMsgCount"], stats["filterRejectedMsgCount"]) == (4, 2)
        internal = get_json(f"{broker.admin_url}/admin/v2/persistent/public/default/grouped/internalStats")
        assert internal["numberOfEntries"] == 4  # the proposal's four batches, judged as such
    finally:
        producer_client.close()
        if consumer_api == "magnetar":
            consumer_client.close()
