"""SEND frames of the official pulsar-client, decoded and rebuilt byte for byte.

Each test runs twice: on the checked-in recording (tests/wire/vectors/, so a codec change
that breaks old bytes fails even if the client changed) and on a recording made now
(so a client upgrade that changes its bytes fails too).

Rebuilding: the command, MessageMetadata and every SingleMessageMetadata are built from
the scenario's inputs (only publish_time and deliver_at_time come from the recording,
being clock readings), the batch with `encode_batch`, compressed with `compress`, the
entry with `build_entry` and the frame with `encode_payload_command`, then compared with
the recorded frame. LZ4, ZLIB and ZSTD output is byte-identical to the C++ client's;
SNAPPY is not (cramjam's Rust encoder picks different copies than Google's C++ snappy),
so for SNAPPY only the compressed block is taken from the recording, after checking it
decompresses to the bytes we would have compressed.
"""

from __future__ import annotations

from typing import Any

import pytest
from wire_recorder import DELAY_MS, SCENARIOS, Scenario

from magnetar.wire.batch import decode_messages, encode_batch
from magnetar.wire.compression import compress, decompress
from magnetar.wire.entry import build_entry, parse_entry, verify_checksum
from magnetar.wire.frames import FrameDecoder, encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAX_SIZE = 5 * 1024 * 1024
NOT_BYTE_IDENTICAL = {pb.SNAPPY}
CODECS = {"NONE": pb.NONE, "LZ4": pb.LZ4, "ZLib": pb.ZLIB, "ZSTD": pb.ZSTD, "SNAPPY": pb.SNAPPY}

by_name = pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])


def decode_send(raw: bytes) -> tuple[pb.BaseCommand, bytes]:
    (frame,) = FrameDecoder().feed(raw)
    assert frame.command.type == pb.BaseCommand.SEND
    assert frame.payload is not None
    return frame.command, frame.payload


def expected_single(message: dict[str, Any], sequence_id: int) -> pb.SingleMessageMetadata:
    """What the C++ producer writes per batched message (wire-protocol.md §2)."""
    single = pb.SingleMessageMetadata(payload_size=len(message["content"]), sequence_id=sequence_id)
    for key, value in sorted(message.get("properties", {}).items()):
        single.properties.add(key=key, value=value)
    if "partition_key" in message:
        single.partition_key = message["partition_key"]
    if "event_timestamp" in message:
        single.event_time = message["event_timestamp"]
    if "ordering_key" in message:
        single.ordering_key = message["ordering_key"].encode()
    return single


def expected_metadata(scenario: Scenario, index: int, recorded: pb.MessageMetadata) -> pb.MessageMetadata:
    """The MessageMetadata of SEND number `index`, from inputs plus the recorded clocks."""
    first = scenario.messages[index]
    metadata = pb.MessageMetadata(
        producer_name=scenario.producer_name, sequence_id=index, publish_time=recorded.publish_time
    )
    if not scenario.batched:
        for key, value in sorted(first.get("properties", {}).items()):
            metadata.properties.add(key=key, value=value)
        if "event_timestamp" in first:
            metadata.event_time = first["event_timestamp"]
        if "deliver_after" in first:
            metadata.deliver_at_time = recorded.deliver_at_time
    if "partition_key" in first:
        metadata.partition_key = first["partition_key"]
    if "ordering_key" in first:
        metadata.ordering_key = first["ordering_key"].encode()
    if scenario.batched:
        metadata.num_messages_in_batch = len(scenario.messages)
    return metadata


def plain_payload(scenario: Scenario, index: int) -> bytes:
    if scenario.batched:
        return encode_batch([(expected_single(m, i), m["content"]) for i, m in enumerate(scenario.messages)])
    return scenario.messages[index]["content"]


@by_name
def test_recorded_sends_decode_field_by_field(vectors: dict[str, list[bytes]], scenario: Scenario) -> None:
    frames = vectors[scenario.name]
    assert len(frames) == (1 if scenario.batched else len(scenario.messages))
    for index, raw in enumerate(frames):
        command, entry = decode_send(raw)
        verify_checksum(entry)
        parsed = parse_entry(entry)
        metadata = parsed.metadata
        assert parsed.broker_entry_metadata is None
        assert parsed.checksum is not None
        assert command.send.sequence_id == metadata.sequence_id == index
        assert metadata.producer_name == scenario.producer_name
        assert not command.send.HasField("highest_sequence_id")
        codec = CODECS[scenario.compression]
        assert metadata.HasField("compression") == (codec != pb.NONE)
        assert metadata.compression == codec
        plain = plain_payload(scenario, index)
        if codec != pb.NONE:
            assert metadata.uncompressed_size == len(plain)
        messages = decode_messages(metadata, parsed.payload, max_size=MAX_SIZE)
        if scenario.batched:
            check_batch(scenario, command, metadata, messages)
        else:
            check_single(scenario.messages[index], command, metadata, messages)


def check_single(message: dict[str, Any], command: pb.BaseCommand, metadata: pb.MessageMetadata, decoded: list) -> None:
    assert not command.send.HasField("num_messages")
    assert not metadata.HasField("num_messages_in_batch")
    assert {kv.key: kv.value for kv in metadata.properties} == message.get("properties", {})
    assert metadata.HasField("partition_key") == ("partition_key" in message)
    assert metadata.partition_key == message.get("partition_key", "")
    assert metadata.ordering_key == message.get("ordering_key", "").encode()
    assert metadata.HasField("event_time") == ("event_timestamp" in message)
    assert metadata.event_time == message.get("event_timestamp", 0)
    assert metadata.HasField("deliver_at_time") == ("deliver_after" in message)
    if "deliver_after" in message:
        # Absolute time, computed by the client when the message was built (trace §4.1).
        assert abs(metadata.deliver_at_time - metadata.publish_time - DELAY_MS) < 1000
    [only] = decoded
    assert only.index == -1
    assert bytes(only.value) == message["content"]
    assert only.metadata.partition_key == metadata.partition_key
    assert list(only.metadata.properties) == list(metadata.properties)


def check_batch(scenario: Scenario, command: pb.BaseCommand, metadata: pb.MessageMetadata, decoded: list) -> None:
    count = len(scenario.messages)
    first = scenario.messages[0]
    assert command.send.num_messages == metadata.num_messages_in_batch == count
    # Only the first message's key is copied out; properties and times stay per message.
    assert metadata.partition_key == first["partition_key"]
    assert not metadata.properties
    assert not metadata.HasField("event_time")
    assert not metadata.HasField("deliver_at_time")
    assert [m.index for m in decoded] == list(range(count))
    for message, got in zip(scenario.messages, decoded, strict=True):
        single = got.metadata
        assert single.sequence_id == got.index
        assert single.payload_size == len(message["content"])
        assert bytes(got.value) == message["content"]
        assert {kv.key: kv.value for kv in single.properties} == message.get("properties", {})
        assert single.HasField("partition_key") == ("partition_key" in message)
        assert single.partition_key == message.get("partition_key", "")
        assert single.ordering_key == message.get("ordering_key", "").encode()
        assert single.event_time == message.get("event_timestamp", 0)
        assert not single.HasField("null_value")


@by_name
def test_recorded_sends_rebuild_byte_for_byte(vectors: dict[str, list[bytes]], scenario: Scenario) -> None:
    for index, raw in enumerate(vectors[scenario.name]):
        command, entry = decode_send(raw)
        recorded = parse_entry(entry)
        metadata = expected_metadata(scenario, index, recorded.metadata)
        payload = plain_payload(scenario, index)
        codec = CODECS[scenario.compression]
        if codec != pb.NONE:
            metadata.compression = codec
            metadata.uncompressed_size = len(payload)
            payload = our_compressed_or_recorded(codec, payload, bytes(recorded.payload))
        send = pb.BaseCommand(type=pb.BaseCommand.SEND)
        send.send.producer_id = command.send.producer_id
        send.send.sequence_id = index
        if scenario.batched:
            send.send.num_messages = len(scenario.messages)
        assert encode_payload_command(send, build_entry(metadata, payload)) == raw


def our_compressed_or_recorded(codec: int, plain: bytes, recorded: bytes) -> bytes:
    ours = compress(codec, plain)
    if codec in NOT_BYTE_IDENTICAL:
        assert decompress(codec, ours, len(plain), max_size=MAX_SIZE) == plain
        assert decompress(codec, recorded, len(plain), max_size=MAX_SIZE) == plain
        return recorded
    assert ours == recorded
    return ours
