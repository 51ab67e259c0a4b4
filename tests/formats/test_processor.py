"""The processor registry and per-entry choice by the `entry.format` property."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from magnetar.formats import (
    EntryPayload,
    PayloadProcessor,
    UnknownFormatError,
    entry_format,
    resolve_processors,
)
from magnetar.formats.processor import ENTRY_POINT_GROUP, load_processor
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import FORMAT_PROPERTY
from magnetar.wire.proto import pulsar_api_pb2 as pb


def _metadata(fmt: str | None, count: int = 2) -> pb.MessageMetadata:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=count)
    if fmt is not None:
        metadata.properties.add(key=FORMAT_PROPERTY, value=fmt)
    return metadata


def test_the_format_is_read_from_message_metadata() -> None:
    assert entry_format(_metadata(None)) == "pulsar"
    assert entry_format(_metadata("kafka")) == "kafka"


def test_builtins_resolve_by_name_and_through_entry_points() -> None:
    names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert {"pulsar", "kafka", "arrow"} <= names
    assert resolve_processors("kafka, arrow").by_format.keys() == {"kafka", "arrow", "pulsar"}
    assert resolve_processors(None) is None
    with pytest.raises(ValueError, match="no payload processor named 'avro'"):
        load_processor("avro")


def test_an_unknown_format_names_itself() -> None:
    entry = EntryPayload(None, _metadata("parquet"), memoryview(b"xx"), "parquet")
    with pytest.raises(UnknownFormatError, match=r"format 'parquet'.*pass payload_processor='parquet'"):
        resolve_processors("kafka").messages(entry)


class Reversing(PayloadProcessor):
    """A catch-all processor in the Java shape: defers to Pulsar's format, then reorders."""

    def messages(self, entry, context):
        assert context.get_property("missing") is None
        return list(reversed(context.default_messages()))


def test_a_catch_all_processor_sees_every_entry_and_can_defer() -> None:
    payload = encode_batch([(pb.SingleMessageMetadata(), b"a"), (pb.SingleMessageMetadata(), b"b")])
    entry = EntryPayload(None, _metadata(None), memoryview(payload), "pulsar")
    messages = resolve_processors(Reversing()).messages(entry)
    assert [bytes(m.value) for m in messages] == [b"b", b"a"]


def test_a_processor_that_raises_becomes_a_named_error() -> None:
    class Broken(PayloadProcessor):
        formats = ("mine",)

        def messages(self, entry, context):
            raise KeyError("oops")

    entry = EntryPayload(None, _metadata("mine"), memoryview(b""), "mine")
    with pytest.raises(ValueError, match="corrupt mine payload: KeyError"):
        resolve_processors([Broken()]).messages(entry)
