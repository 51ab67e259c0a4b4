"""The official pulsar-client consumes entries that our encoders built.

The recorder serves, behind MESSAGE commands, a batch compressed with each codec (with a
broker-entry-metadata prefix, as an exposing broker would send it) and a non-batched
message. If the C++ client accepts our CRC, our compressed bytes, our batch layout and
our prefix, it yields exactly the messages we put in, and it acknowledges them.
"""

from __future__ import annotations

import pulsar
import pytest
from wire_recorder import LEDGER_ID, Recorder, new_client

from magnetar.wire.batch import encode_batch
from magnetar.wire.compression import compress
from magnetar.wire.entry import add_broker_entry_metadata, build_entry
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

PUBLISH_TIME = 1_700_000_000_000
# (value, property "n", partition key, event time) per batched message
BATCH = [(f"ours {i} ".encode() * (i + 1), str(i), f"key-{i}", PUBLISH_TIME + i) for i in range(3)]


def batch_entry(codec: int) -> bytes:
    singles = [
        pb.SingleMessageMetadata(partition_key=key, event_time=event, properties=[pb.KeyValue(key="n", value=n)])
        for _, n, key, event in BATCH
    ]
    plain = encode_batch(list(zip(singles, [value for value, *_ in BATCH], strict=True)))
    metadata = pb.MessageMetadata(
        producer_name="magnetar", sequence_id=0, publish_time=PUBLISH_TIME, num_messages_in_batch=len(BATCH)
    )
    if codec != pb.NONE:
        metadata.compression = codec
        metadata.uncompressed_size = len(plain)
    entry = build_entry(metadata, compress(codec, plain))
    return add_broker_entry_metadata(entry, pb.BrokerEntryMetadata(broker_timestamp=PUBLISH_TIME, index=2))


def single_entry() -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="magnetar",
        sequence_id=3,
        publish_time=PUBLISH_TIME,
        partition_key="solo",
        properties=[pb.KeyValue(key="single", value="yes")],
    )
    return build_entry(metadata, b"just one")


@pytest.mark.parametrize("codec", [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY], ids=pb.CompressionType.Name)
def test_official_consumer_reads_our_entries(recorder: Recorder, codec: int) -> None:
    topic = f"persistent://public/default/ours-{pb.CompressionType.Name(codec)}"
    recorder.serve[topic] = [batch_entry(codec), single_entry()]
    client = new_client(recorder)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        received = [consumer.receive(timeout_millis=5000) for _ in range(len(BATCH) + 1)]
        for message in received:
            consumer.acknowledge(message)
        consumer.close()
    finally:
        client.close()

    for i, (message, (value, n, key, event)) in enumerate(zip(received, BATCH, strict=False)):
        assert message.data() == value
        assert message.properties() == {"n": n}
        assert message.partition_key() == key
        assert message.event_timestamp() == event
        assert message.publish_timestamp() == PUBLISH_TIME
        assert message.producer_name() == "magnetar"
        # The client's own serialized id decodes to ours, batch size included.
        assert MessageId.deserialize(message.message_id().serialize()) == MessageId(
            LEDGER_ID, 0, batch_index=i, batch_size=len(BATCH)
        )
    last = received[-1]
    assert (last.data(), last.properties(), last.partition_key()) == (b"just one", {"single": "yes"}, "solo")
    assert MessageId.deserialize(last.message_id().serialize()) == MessageId(LEDGER_ID, 1)
    # Nothing was dropped as corrupt: acks carry no validation_error and cover both entries.
    acked = {(m.ledgerId, m.entryId) for ack in recorder.acks for m in ack.message_id}
    assert acked == {(LEDGER_ID, 0), (LEDGER_ID, 1)}
    assert not any(ack.HasField("validation_error") for ack in recorder.acks)
