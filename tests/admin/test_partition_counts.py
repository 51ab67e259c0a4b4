"""A partition count is a number a client chooses; the broker bounds it (Pulsar's key)."""

from __future__ import annotations

import json
import time

import pytest
from admin_http import get_json, http
from rawclient import RawClient
from standalone import run_standalone

from magnetar.storage import SqliteMetadataStore
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
BASE = "/admin/v2/persistent/public/default"


def put_partitions(broker, topic: str, body: str) -> tuple[int, dict]:
    status, _, answer = http("PUT", f"{broker.admin_url}{BASE}/{topic}/partitions", body.encode())
    return status, json.loads(answer) if answer else {}


@pytest.mark.parametrize("count", ["1000000000000", "0", "-3", "1025"])
def test_out_of_range_counts_are_412(broker, count):
    status, answer = put_partitions(broker, "huge", count)
    assert status == 412, answer
    assert "Number of partitions" in answer["reason"]
    assert get_json(f"{broker.admin_url}{BASE}") == []


def test_the_limit_is_configurable(broker_factory):
    broker = broker_factory("maxNumPartitionsPerPartitionedTopic=4")
    assert put_partitions(broker, "five", "5")[0] == 412
    assert put_partitions(broker, "four", "4")[0] == 204
    assert len(get_json(f"{broker.admin_url}{BASE}")) == 4


def test_default_partitions_over_the_limit_stop_the_start(tmp_path):
    result = run_standalone("--data-dir", str(tmp_path), "-c", "maxNumPartitionsPerPartitionedTopic=4",
                            "-c", "defaultNumPartitions=8")
    assert result.returncode == 2
    assert "maxNumPartitionsPerPartitionedTopic" in result.stderr


def test_a_stored_trillion_partitions_does_not_break_listings(broker, client_factory):
    """Data dirs written by brokers that took any count start, list and serve the rest."""
    assert put_partitions(broker, "fine", "3")[0] == 204
    broker.stop()
    store = SqliteMetadataStore(broker.data_dir / "metadata.db")
    store.put("/admin/partitioned-topics/public/default/persistent/huge",
              json.dumps({"partitions": 10**12}).encode())
    store.close()
    broker.start()

    started = time.monotonic()
    listed = get_json(f"{broker.admin_url}{BASE}")
    assert sorted(listed) == [f"persistent://public/default/fine-partition-{i}" for i in range(3)]
    raw = RawClient(broker.url)
    raw.connect()
    raw.command(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=pb.CommandGetTopicsOfNamespace(
        request_id=1, namespace="public/default")))
    assert len(raw.expect(T.GET_TOPICS_OF_NAMESPACE_RESPONSE).getTopicsOfNamespaceResponse.topics) == 3
    raw.command(T(type=T.PARTITIONED_METADATA, partitionMetadata=pb.CommandPartitionedTopicMetadata(
        topic="persistent://public/default/huge", request_id=2)))
    answer = raw.expect(T.PARTITIONED_METADATA_RESPONSE).partitionMetadataResponse
    assert answer.error == pb.MetadataError
    raw.close()
    assert time.monotonic() - started < 10
    client = client_factory(broker.url)
    client.create_producer("persistent://public/default/fine").send(b"still served")
