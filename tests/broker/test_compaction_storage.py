"""Compaction in-process on real storage: GetLastMessageId's answer comes from
MessageMetadata alone, older compactors' entries, keyless messages, crash leftovers."""

from __future__ import annotations

import time

import pytest

from magnetar.broker.compaction import CompactionOptions
from magnetar.broker.compaction.service import BuiltinCompactionService
from magnetar.storage import ManagedLedgerFactory, Position
from magnetar.storage.compacted_ledger import CompactedLedgerStore
from magnetar.wire.batch import encode_batch
from magnetar.wire.compaction import PLACEHOLDER, last_retained_index
from magnetar.wire.compression import compress, counters
from magnetar.wire.entry import build_entry, parse_entry
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

NAME = "public/default/persistent/t"


def metadata(seq: int, **fields) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=int(time.time() * 1000) + seq,
                              **fields)


def single(key: str | None, value: bytes | None) -> tuple[pb.SingleMessageMetadata, bytes]:
    smm = pb.SingleMessageMetadata(payload_size=0)
    if key is not None:
        smm.partition_key = key
    if value is None:
        smm.null_value = True
    return smm, value or b""


def lz4_batch(seq: int, messages: list[tuple[str | None, bytes | None]]) -> bytes:
    plain = encode_batch([single(k, v) for k, v in messages])
    md = metadata(seq, num_messages_in_batch=len(messages), compression=pb.LZ4, uncompressed_size=len(plain))
    return build_entry(md, compress(pb.LZ4, plain))


def plain_message(seq: int, key: str | None, value: bytes) -> bytes:
    md = metadata(seq)
    if key is not None:
        md.partition_key = key
    return build_entry(md, value)


@pytest.fixture
def factory(tmp_path):
    with ManagedLedgerFactory(tmp_path / "data") as f:
        yield f


def service(factory, **options) -> BuiltinCompactionService:
    return BuiltinCompactionService(factory.open(NAME), factory, CompactionOptions(**options))


def test_last_message_position_opens_no_payload(factory):
    ledger = factory.open(NAME)
    ledger.append_sync(plain_message(0, "a", b"x"))
    big = [(f"k{i}", f"v{i}".encode()) for i in range(1000)] + [("k0", None)]
    position = ledger.append_sync(lz4_batch(1, big))
    svc = service(factory)
    svc.compact()
    before = counters.decompressions
    found = svc.last_message_position()
    assert counters.decompressions == before  # metadata only
    assert (found.ledger_id, found.entry_id, found.batch_index) == (position.ledger_id, position.entry_id, 999)


def test_answer_survives_garbage_payload_behind_valid_metadata(factory):
    """A compacted entry whose payload is not even LZ4: metadata alone must do."""
    store = CompactedLedgerStore(factory, NAME)
    writer = store.new_writer()
    md = metadata(0, num_messages_in_batch=8, compression=pb.LZ4, uncompressed_size=4096)
    md.compacted_batch_indexes.extend([2, 5])
    writer.add(Position(7, 3), build_entry(md, b"\xff" * 64))
    store.commit(writer, Position(7, 3))
    store.close()
    svc = service(factory)
    found = svc.last_message_position()
    assert (found.entry_id, found.batch_index) == (3, 5)
    encrypted = metadata(1, num_messages_in_batch=4)
    encrypted.encryption_keys.add(key="k", value=b"x")
    assert last_retained_index(encrypted) == 3  # an encrypted batch: its size, no payload


def test_older_compactor_entries_need_the_payload(factory):
    """No field 31, placeholders in the payload: the pre-PIP-429 way still answers."""
    plain = PLACEHOLDER + encode_batch([single("b", b"2")]) + PLACEHOLDER
    md = metadata(0, num_messages_in_batch=3, compression=pb.LZ4, uncompressed_size=len(plain))
    entry = build_entry(md, compress(pb.LZ4, plain))
    parsed = parse_entry(entry)
    with pytest.raises(WireError):
        last_retained_index(parsed.metadata)
    assert last_retained_index(parsed.metadata, lambda: parsed.payload, max_size=1 << 20) == 1
    ledger = factory.open(NAME)
    position = ledger.append_sync(entry)
    svc = service(factory)
    svc.compact()  # phase one skips the placeholders; the rewrite adds field 31
    [(stored_at, data)] = svc.read_compacted_entries(Position(0, 0), 10)
    assert stored_at == position
    assert list(parse_entry(data).metadata.compacted_batch_indexes) == [1]


@pytest.mark.parametrize("retain", [False, True])
def test_keyless_messages_follow_retain_null_key(factory, retain):
    ledger = factory.open(NAME)
    ledger.append_sync(plain_message(0, None, b"nokey"))
    ledger.append_sync(plain_message(1, "k", b"v"))
    ledger.append_sync(lz4_batch(2, [(None, b"n1"), ("j", b"w")]))
    svc = service(factory, retain_null_key=retain)
    svc.compact()
    entries = svc.read_compacted_entries(Position(0, 0), 10)
    kept = [list(parse_entry(d).metadata.compacted_batch_indexes) for _, d in entries]
    assert kept == ([[], [], [0, 1]] if retain else [[], [1]])


def test_second_compaction_reads_only_what_is_new(factory):
    ledger = factory.open(NAME)
    for i in range(100):
        ledger.append_sync(plain_message(i, f"k{i % 10}", f"v{i}".encode()))
    svc = service(factory)
    first = svc.compact()
    assert (first.entries_read, first.entries_written, first.keys) == (100, 10, 10)
    assert svc.compact() is None  # nothing new
    ledger.append_sync(plain_message(100, "k0", b"new"))
    second = svc.compact()
    assert (second.entries_read, second.entries_written) == (11, 10)
    last = svc.read_compacted_entries(Position(0, 0), 100)[-1]
    assert bytes(parse_entry(last[1]).payload) == b"new"


def test_uncommitted_ledger_files_are_removed_on_open(factory):
    ledger = factory.open(NAME)
    ledger.append_sync(plain_message(0, "k", b"v"))
    svc = service(factory)
    svc.compact()
    kept_id = svc.store.current.info.ledger_id
    writer = svc.store.new_writer()  # a compaction that dies before its commit
    writer.add(Position(0, 0), plain_message(0, "k", b"v"))
    writer.finish()
    svc.close()
    store = CompactedLedgerStore(factory, NAME)
    names = sorted(p.name for p in store.directory.iterdir())
    assert names == [f"{kept_id}.idx", f"{kept_id}.log", f"{kept_id}.pos"]
    store.close()
