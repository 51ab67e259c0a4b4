"""How a broker deduplicates what another cluster's replicator sends it, as Pulsar does: by
source position when the replicator's client announced `supports_repl_dedup_by_lid_and_eid`,
else by the original producers' names and sequence ids in the metadata; never by the
replicator's own sequence of SENDs, which interleaves many producers."""

from __future__ import annotations

import time

import pytest
from rawclient import RawClient
from standalone import Standalone

from magnetar.admin_client import AdminClient
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
NOT_STORED = (2**64 - 1, 2**64 - 1)  # -1:-1 as the receipt's unsigned fields carry it


@pytest.fixture(scope="module")
def west(tmp_path_factory):
    broker = Standalone(tmp_path_factory.mktemp("dedup") / "data",
                        ["clusterName=west", "brokerDeduplicationEnabled=true"]).start()
    # west takes replication only from clusters its namespace lists; this east is a raw client
    # here, with no URL for west's own replicators to reach it by
    admin = AdminClient(broker.admin_url)
    admin.create_cluster("east", {})
    admin.update_tenant("public", [], ["east", "west"])
    admin.set_replication_clusters("public/default", ["east", "west"])
    yield broker
    broker.stop()


def replicator(url: str, topic: str, name: str, *, by_position: bool) -> RawClient:
    raw = RawClient(url)
    connect = pb.CommandConnect(client_version="raw", protocol_version=20,
                                feature_flags=pb.FeatureFlags(supports_repl_dedup_by_lid_and_eid=by_position))
    raw.command(T(type=T.CONNECT, connect=connect))
    raw.expect(T.CONNECTED)
    raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=0, request_id=1,
                                                               producer_name=name, user_provided_producer_name=True)))
    raw.expect(T.PRODUCER_SUCCESS)
    return raw


def send(raw: RawClient, producer: str, sequence_id: int, source: str | None) -> tuple[int, int] | str:
    """One replicated message; its receipt's (ledger, entry), or the SEND_ERROR's code name."""
    metadata = pb.MessageMetadata(producer_name=producer, sequence_id=sequence_id,
                                  publish_time=int(time.time() * 1000), replicated_from="east")
    if source is not None:
        metadata.properties.add(key="__MSG_PROP_REPL_SOURCE_POSITION", value=source)
    raw.command(T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=sequence_id)),
                build_entry(metadata, f"{producer}-{sequence_id}".encode()))
    answer = raw.next_frame().command
    if answer.type == T.SEND_ERROR:
        return pb.ServerError.Name(answer.send_error.error)
    return answer.send_receipt.message_id.ledgerId, answer.send_receipt.message_id.entryId


def test_by_source_position_when_the_replicator_says_so(west):
    raw = replicator(west.url, "persistent://public/default/by-position", "pulsar.repl.east-->west", by_position=True)
    try:
        # two producers of the source topic, their sequence ids interleaving
        assert send(raw, "p1", 5, "3:0") != NOT_STORED
        assert send(raw, "p2", 0, "3:1") != NOT_STORED
        assert send(raw, "p1", 6, "3:2") != NOT_STORED
        assert send(raw, "p2", 1, "4:0") != NOT_STORED
        assert send(raw, "p1", 5, "3:0") == NOT_STORED  # resent after a lost receipt
        assert send(raw, "p2", 1, "4:0") == NOT_STORED
        assert send(raw, "p2", 2, None) == "PersistenceError"  # cannot tell: refused, as Pulsar refuses it
    finally:
        raw.close()


def test_by_original_producer_when_the_replicator_does_not(west):
    raw = replicator(west.url, "persistent://public/default/by-producer", "pulsar.repl.east-->west", by_position=False)
    try:
        assert send(raw, "p1", 5, None) != NOT_STORED
        assert send(raw, "p2", 0, None) != NOT_STORED  # below p1's: another producer, stored
        assert send(raw, "p1", 6, None) != NOT_STORED
        assert send(raw, "p1", 5, None) == NOT_STORED
        assert send(raw, "p2", 0, None) == NOT_STORED
    finally:
        raw.close()
