"""What compaction keeps, rule by rule (docs/compaction.md, "What is kept"), on real storage.

Each row is a topic (a list of entries, as producers write them) and what a compacted
reader may receive afterwards: (entry number, batch index, key, value) in order. What is
visible is read back from the stored compacted ledger by the wire format's own rules
(field 31 for a batch, the entry itself otherwise), never from the compactor's state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest
from compaction_helpers import PLACEHOLDER

from magnetar.broker.compaction import CompactionOptions
from magnetar.broker.compaction.compactor import CompactionCancelled
from magnetar.broker.compaction.service import BuiltinCompactionService
from magnetar.formats.kafka_compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from magnetar.formats.kafka_records import (
    decode_record_batch,
    encode_record_batch,
    kafka_entry_properties,
)
from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.wire.batch import decode_batch, encode_batch
from magnetar.wire.compaction import last_retained_index
from magnetar.wire.compression import compress, decompress
from magnetar.wire.entry import build_entry, entry_format, parse_entry
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

NAME = "public/default/persistent/rules"
MAX = 1 << 20
Key = str | None
Visible = tuple[int, int, Key, bytes]


@dataclass
class Msg:
    """One message: value None is a null value (`send(None)`), b"" an empty one."""

    key: Key
    value: bytes | None
    properties: dict[str, str] = field(default_factory=dict)
    null_key: bool = False

    def single(self) -> pb.SingleMessageMetadata:
        smm = pb.SingleMessageMetadata(payload_size=0, properties=_kv(self.properties))
        if self.key is not None:
            smm.partition_key = self.key
        smm.null_partition_key = self.null_key
        smm.null_value = self.value is None
        return smm


def _kv(properties: dict[str, str]) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in properties.items()]


def _metadata(seq: int, **fields) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=int(time.time() * 1000), **fields)


def single(seq: int, msg: Msg, codec: int = pb.NONE) -> bytes:
    """An unbatched message, its fields in MessageMetadata; compressed as a producer with
    compression on sends it (uncompressed_size says how long the value really is)."""
    md = _metadata(seq, properties=_kv(msg.properties))
    if msg.key is not None:
        md.partition_key = msg.key
    md.null_partition_key = msg.null_key
    md.null_value = msg.value is None
    value = msg.value or b""
    if codec != pb.NONE:
        md.compression, md.uncompressed_size = codec, len(value)
        value = compress(codec, value)
    return build_entry(md, value)


def batch(seq: int, msgs: list[Msg], codec: int = pb.LZ4, retained: list[int] | None = None) -> bytes:
    """A batch as a producer sends it; `retained` sets field 31, as a compactor writes it."""
    plain = encode_batch([(m.single(), m.value or b"") for m in msgs])
    md = _metadata(seq, num_messages_in_batch=len(msgs), compacted_batch_indexes=retained or [])
    if codec != pb.NONE:
        md.compression, md.uncompressed_size = codec, len(plain)
    first_key = msgs[0].key
    if first_key is not None:  # as the official client does: the first message's key on the batch
        md.partition_key = first_key
    return build_entry(md, compress(codec, plain) if codec != pb.NONE else plain)


def encrypted_batch(seq: int, key: str, count: int) -> bytes:
    md = _metadata(seq, num_messages_in_batch=count, partition_key=key)
    md.encryption_keys.add(key="k", value=b"x")
    return build_entry(md, b"\x9c" * 40)  # ciphertext: nothing here can open it


def encrypted_single(seq: int, key: str, size: int) -> bytes:
    md = _metadata(seq, partition_key=key, compression=pb.LZ4, uncompressed_size=size)
    md.encryption_keys.add(key="k", value=b"x")
    return build_entry(md, b"\x9c" * 24)


def marker(seq: int) -> bytes:
    return build_entry(_metadata(seq, partition_key="a", marker_type=20), b"")


def _plain(md: pb.MessageMetadata, payload: bytes) -> bytes:
    if not md.HasField("compression") or md.compression == pb.NONE:
        return bytes(payload)
    return decompress(md.compression, payload, md.uncompressed_size, max_size=MAX)


def _key(md: pb.MessageMetadata | pb.SingleMessageMetadata) -> Key:
    return md.partition_key if md.HasField("partition_key") and not md.null_partition_key else None


def stored_messages(entry: bytes) -> list[tuple[int, pb.SingleMessageMetadata | pb.MessageMetadata, bytes]]:
    """(batch index, metadata, value) of each message a compacted reader receives of a stored entry."""
    parsed = parse_entry(entry)
    md = parsed.metadata
    if md.encryption_keys:
        indexes = md.compacted_batch_indexes if md.HasField("num_messages_in_batch") else [-1]
        return [(i, md, b"<encrypted>") for i in indexes]
    if not md.HasField("num_messages_in_batch"):
        return [(-1, md, _plain(md, parsed.payload))]
    assert md.compacted_batch_indexes, "a stored batch says which of its messages remain"
    messages = decode_batch(_plain(md, parsed.payload), md.num_messages_in_batch)
    assert len(messages) == md.num_messages_in_batch, "a compacted batch keeps every slot"
    assert all(not messages[i].metadata.compacted_out for i in md.compacted_batch_indexes)
    return [(i, messages[i].metadata, bytes(messages[i].value)) for i in md.compacted_batch_indexes]


class Topic:
    def __init__(self, factory: ManagedLedgerFactory) -> None:
        self.factory = factory
        self.ledger = factory.open(NAME)
        self.numbers: dict[Position, int] = {}
        self.stored: list[tuple[Position, bytes]] = []

    def append(self, *entries: bytes) -> None:
        for data in entries:
            self.numbers[self.ledger.append_sync(data)] = len(self.numbers)

    def compact(self, **options) -> list[Visible]:
        """Compact, then what a compacted reader receives: (entry number, batch index, key, value)."""
        svc = BuiltinCompactionService(self.ledger, self.factory, CompactionOptions(**options))
        svc.compact()
        self.stored = svc.read_compacted_entries(Position(0, 0), 10_000)
        return [(self.numbers[position], index, _key(md), value)
                for position, data in self.stored for index, md, value in stored_messages(data)]


@pytest.fixture
def topic(tmp_path):
    with ManagedLedgerFactory(tmp_path / "data") as factory:
        yield Topic(factory)


def rows(*cases: tuple[str, list, list[Visible]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("entries", "expected"), [c[1:] for c in cases], ids=[c[0] for c in cases])


S = Msg  # short, for the tables


@rows(
    ("latest-value-wins", [single(0, S("a", b"1")), single(1, S("b", b"2")), single(2, S("a", b"3"))],
     [(1, -1, "b", b"2"), (2, -1, "a", b"3")]),
    ("null-value-deletes", [single(0, S("a", b"1")), single(1, S("b", b"2")), single(2, S("a", None))],
     [(1, -1, "b", b"2")]),
    ("empty-value-deletes", [single(0, S("a", b"1")), single(1, S("b", b"2")), single(2, S("a", b""))],
     [(1, -1, "b", b"2")]),
    ("compressed-empty-value-deletes", [single(0, S("a", b"1")), single(1, S("a", b""), pb.LZ4)], []),
    ("compressed-value-is-kept", [single(0, S("a", b"1"), pb.ZSTD)], [(0, -1, "a", b"1")]),
    ("a-one-byte-value-is-no-tombstone", [single(0, S("a", b"1")), single(1, S("a", b"\x00"))],
     [(1, -1, "a", b"\x00")]),
    ("deleted-then-written-again", [single(0, S("a", b"1")), single(1, S("a", None)), single(2, S("a", b"2"))],
     [(2, -1, "a", b"2")]),
    ("only-tombstones", [single(0, S("a", None)), single(1, S("b", b""))], []),
    ("keyless-dropped", [single(0, S(None, b"x")), single(1, S("a", b"1"))], [(1, -1, "a", b"1")]),
    ("null-partition-key-is-keyless", [single(0, S("a", b"x", null_key=True)), single(1, S("a", b"1"))],
     [(1, -1, "a", b"1")]),
    ("batch-latest-wins-inside", [batch(0, [S("a", b"1"), S("b", b"2"), S("a", b"3")])],
     [(0, 1, "b", b"2"), (0, 2, "a", b"3")]),
    ("batch-null-deletes", [batch(0, [S("a", b"1"), S("b", b"2"), S("a", None)])], [(0, 1, "b", b"2")]),
    ("batch-empty-deletes", [batch(0, [S("a", b"1"), S("b", b"2"), S("a", b"")])], [(0, 1, "b", b"2")]),
    ("batch-empty-deletes-uncompressed", [batch(0, [S("a", b"1"), S("a", b"")], pb.NONE)], []),
    ("uncompressed-batch-kept-in-part", [batch(0, [S("a", b"1"), S("a", b"2"), S("b", b"1")], pb.NONE)],
     [(0, 1, "a", b"2"), (0, 2, "b", b"1")]),
    ("field-31-leaves-out-the-rest", [batch(0, [S("a", b"1"), S("b", b"1"), S("c", b"1")], retained=[1])],
     [(0, 1, "b", b"1")]),
    ("batch-kept-whole", [batch(0, [S("a", b"1"), S("b", b"2")], pb.ZLIB)],
     [(0, 0, "a", b"1"), (0, 1, "b", b"2")]),
    ("batch-keyless-dropped", [batch(0, [S(None, b"x"), S("a", b"1"), S("a", b"2", null_key=True)])],
     [(0, 1, "a", b"1")]),
    ("mixed-keys-across-batches",
     [batch(0, [S("a", b"1"), S("b", b"1"), S("c", b"1")]), batch(1, [S("b", b"2"), S("d", b"1")], pb.SNAPPY),
      single(2, S("c", None))],
     [(0, 0, "a", b"1"), (1, 0, "b", b"2"), (1, 1, "d", b"1")]),
    ("a-later-batch-deletes-an-earlier-single",
     [single(0, S("a", b"1")), single(1, S("b", b"1")), batch(2, [S("a", b""), S("c", b"1")])],
     [(1, -1, "b", b"1"), (2, 1, "c", b"1")]),
    ("markers-dropped", [single(0, S("a", b"1")), marker(1)], [(0, -1, "a", b"1")]),
    ("unparseable-dropped", [b"\x0e\x01garbage", single(1, S("a", b"1"))], [(1, -1, "a", b"1")]),
    ("encrypted-batch-kept-whole-by-its-key", [single(0, S("e", b"1")), encrypted_batch(1, "e", 3)],
     [(1, 0, "e", b"<encrypted>"), (1, 1, "e", b"<encrypted>"), (1, 2, "e", b"<encrypted>")]),
    ("encrypted-batch-replaced-by-its-key", [encrypted_batch(0, "e", 3), single(1, S("e", b"2"))],
     [(1, -1, "e", b"2")]),
    ("encrypted-empty-value-deletes", [single(0, S("e", b"1")), encrypted_single(1, "e", 0)], []),
    ("encrypted-value-kept", [single(0, S("e", b"1")), encrypted_single(1, "e", 9)], [(1, -1, "e", b"<encrypted>")]),
)
def test_what_is_kept(topic, entries, expected):
    topic.append(*entries)
    assert topic.compact() == expected


@rows(
    ("keyless-kept", [single(0, S(None, b"x")), single(1, S("a", b"1")), single(2, S(None, b"y"))],
     [(0, -1, None, b"x"), (1, -1, "a", b"1"), (2, -1, None, b"y")]),
    ("keyless-empty-and-null-still-dropped", [single(0, S(None, b"")), single(1, S(None, None))], []),
    ("keyless-in-a-batch", [batch(0, [S(None, b"x"), S("a", b"1"), S("a", b"2")])],
     [(0, 0, None, b"x"), (0, 2, "a", b"2")]),
)
def test_what_is_kept_with_retain_null_key(topic, entries, expected):
    topic.append(*entries)
    assert topic.compact(retain_null_key=True) == expected


def test_retained_messages_keep_their_bytes_and_properties(topic):
    original = [S("a", b"old", properties={"p": "1"}), S("b", b"2", properties={"q": "x", "r": ""}),
                S("a", b"new", properties={"p": "2"}), S("c", b"gone"), S("c", None)]
    unbatched = single(1, S("d", b"4", properties={"s": "1"}), pb.ZSTD)
    topic.append(batch(0, original), unbatched)
    assert topic.compact() == [(0, 1, "b", b"2"), (0, 2, "a", b"new"), (1, -1, "d", b"4")]
    kept = [md for _, data in topic.stored for _, md, _ in stored_messages(data)]
    assert [{p.key: p.value for p in md.properties} for md in kept] == [{"q": "x", "r": ""}, {"p": "2"}, {"s": "1"}]
    # byte for byte: a retained message's slot is the producer's, a dropped one a placeholder
    [(_, stored_batch), (_, stored_single)] = topic.stored
    assert stored_single == unbatched
    produced = [encode_batch([(m.single(), m.value or b"")]) for m in original]
    parsed = parse_entry(stored_batch)
    assert _plain(parsed.metadata, parsed.payload) == b"".join(
        [PLACEHOLDER, produced[1], produced[2], PLACEHOLDER, PLACEHOLDER])


def test_a_second_run_keeps_the_first_runs_survivors_unless_overwritten(topic):
    topic.append(batch(0, [S("a", b"1"), S("b", b"1"), S("c", b"1")]), single(1, S("d", b"1")))
    assert topic.compact() == [(0, 0, "a", b"1"), (0, 1, "b", b"1"), (0, 2, "c", b"1"), (1, -1, "d", b"1")]
    topic.append(single(2, S("b", b"")), batch(3, [S("c", None), S("e", b"1")]))
    assert topic.compact() == [(0, 0, "a", b"1"), (1, -1, "d", b"1"), (3, 1, "e", b"1")]
    topic.append(single(4, S("a", b"2")))
    assert topic.compact() == [(1, -1, "d", b"1"), (3, 1, "e", b"1"), (4, -1, "a", b"2")]


def test_progress_goes_from_0_to_1_through_both_phases_and_a_close_cancels(tmp_path):
    """Progress (the admin API's `progress`) is reported every 1024 entries of each phase:
    from 0 to 0.5 reading, 0.5 to 1 writing, never backwards; a service closed meanwhile
    stops at the next report with nothing put in force."""
    config = ManagedLedgerConfig(sync_data=False)
    with ManagedLedgerFactory(tmp_path / "data", config) as factory:
        ledger = factory.open(NAME)
        for i in range(2100):
            ledger.append_sync(single(i, S(f"k{i % 7}", b"v%d" % i)))
        svc = BuiltinCompactionService(ledger, factory, CompactionOptions())
        reported: list[float] = []
        result = svc.compact(reported.append)
        assert (result.entries_read, result.entries_written, result.keys) == (2100, 7, 7)
        assert reported == sorted(reported) and 0 < reported[0] < 0.5 and reported[-1] <= 1.0
        assert 0.5 in reported and len(reported) >= 3

        for i in range(2100, 4200):  # with the 7 compacted entries, past the 2048th check
            ledger.append_sync(single(i, S("k", b"x")))
        closing = BuiltinCompactionService(ledger, factory, CompactionOptions())
        with pytest.raises(CompactionCancelled):
            closing.compact(lambda _fraction: closing.close())
        assert BuiltinCompactionService(ledger, factory, CompactionOptions()).last_compacted_position() \
            == result.horizon  # the first run's compaction is still the one in force


@pytest.mark.parametrize(("md", "expected"), [
    (_metadata(0), -1),  # not a batch
    (_metadata(0, num_messages_in_batch=1), -1),  # a batch of one reads as a single message
    (_metadata(0, num_messages_in_batch=2, compacted_batch_indexes=[0, 1]), 1),
    (_metadata(0, num_messages_in_batch=2, compacted_batch_indexes=[0]), 0),
    (_metadata(0, num_messages_in_batch=5, compacted_batch_indexes=[1, 3]), 3),
    (_metadata(0, num_messages_in_batch=3, encryption_keys=[pb.EncryptionKeys(key="k", value=b"x")]), 2),
])
def test_the_last_message_a_compacted_reader_gets_from_metadata_alone(md, expected):
    """GetLastMessageId's batch index (PIP-429), without the payload."""
    assert last_retained_index(md) == expected


def test_an_older_compactors_batch_needs_its_payload_and_cannot_be_all_placeholders():
    plain = PLACEHOLDER + PLACEHOLDER
    md = _metadata(0, num_messages_in_batch=2)
    with pytest.raises(WireError, match="a batch without compacted_batch_indexes needs its payload read"):
        last_retained_index(md)
    with pytest.raises(WireError, match="every message of the compacted batch is compacted out"):
        last_retained_index(md, lambda: plain, max_size=MAX)


# -- entries in Kafka's format (PIP-96: one record batch an entry, as the Kafka listener stores them)
def kafka_entry(seq: int, records: list[tuple[bytes | None, bytes | None]], codec: int = CODEC_NONE) -> bytes:
    md = _metadata(seq, num_messages_in_batch=len(records))
    for key, value in kafka_entry_properties().items():
        md.properties.add(key=key, value=value)
    payload = encode_record_batch([(k, v, [], 1_700_000_000_000 + i) for i, (k, v) in enumerate(records)], codec)
    return build_entry(md, payload)


def kafka_visible(entry: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset delta, key, value) of each record a reader gets of a stored Kafka-format entry,
    checking that the batch is whole (CRC, count) and still spans the producer's offsets."""
    parsed = parse_entry(entry)
    header, records = decode_record_batch(parsed.payload, check_crc=True)
    assert header.last_offset_delta == parsed.metadata.num_messages_in_batch - 1
    assert list(parsed.metadata.compacted_batch_indexes) == [r.offset_delta for r in records]
    return [(r.offset_delta, r.key, r.value) for r in records]


def kafka_compact(topic: Topic, **options) -> list[tuple]:
    """Compact, then what a reader gets: (entry number, offset delta, key, value) of a Kafka-format
    entry, (entry number, batch index, key, value) of a Pulsar one."""
    service = BuiltinCompactionService(topic.ledger, topic.factory, CompactionOptions(**options))
    service.compact()
    topic.stored = service.read_compacted_entries(Position(0, 0), 10_000)
    out: list[tuple] = []
    for position, data in topic.stored:
        number = topic.numbers[position]
        if entry_format(parse_entry(data).metadata) == "kafka":
            out += [(number, *record) for record in kafka_visible(data)]
        else:
            out += [(number, index, _key(md), value) for index, md, value in stored_messages(data)]
    return out


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_a_kafka_batch_keeps_its_latest_records_at_their_offsets(topic, codec):
    topic.append(kafka_entry(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"\xff", b"x"), (b"c", b"")], codec),
                 kafka_entry(1, [(b"b", None), (b"d", b"1")], codec))
    assert kafka_compact(topic) == [(0, 2, b"a", b"2"), (0, 3, b"\xff", b"x"), (0, 4, b"c", b""), (1, 1, b"d", b"1")]
    whole = topic.stored[-1][1]
    original = kafka_entry(1, [(b"b", None), (b"d", b"1")], codec)
    assert parse_entry(whole).payload != parse_entry(original).payload  # rewritten: the tombstone went


def test_a_kafka_batch_whose_records_all_live_is_kept_byte_for_byte(topic):
    entry = kafka_entry(0, [(b"a", b"1"), (b"b", b"2")], CODEC_LZ4)
    topic.append(entry)
    assert kafka_compact(topic) == [(0, 0, b"a", b"1"), (0, 1, b"b", b"2")]
    assert parse_entry(topic.stored[0][1]).payload == parse_entry(entry).payload


def test_kafka_and_pulsar_entries_share_their_keys(topic):
    topic.append(single(0, S("a", b"pulsar")), kafka_entry(1, [(b"a", b"kafka"), (b"b", b"1")]),
                 single(2, S("b", None)), kafka_entry(3, [(None, b"keyless"), (b"\xfe", b"bin")]),
                 single(4, S("/g==", b"same key, base64")))
    # the binary key b"\xfe" is Pulsar's base64 key "/g==": the later Pulsar message replaces it
    assert kafka_compact(topic) == [(1, 0, b"a", b"kafka"), (4, -1, "/g==", b"same key, base64")]
    topic.append(kafka_entry(5, [(b"k", b"1")]))  # a second run builds on the first one's view
    assert [row[:3] for row in kafka_compact(topic)] == [(1, 0, b"a"), (4, -1, "/g=="), (5, 0, b"k")]


def test_keyless_kafka_records_are_kept_when_asked(topic):
    topic.append(kafka_entry(0, [(None, b"x"), (b"a", b"1"), (b"a", b"2"), (None, None)]))
    assert kafka_compact(topic, retain_null_key=True) == [(0, 0, None, b"x"), (0, 2, b"a", b"2")]
