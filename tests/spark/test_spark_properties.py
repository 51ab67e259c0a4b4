"""`propertiesFilter`: the same rows as a full read filtered on the `properties` column, and entries
ruled out by their MessageMetadata alone are never decompressed or decoded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magnetar.formats import table as table_module
from magnetar.spark.rows import RowBuilder, RowFilter
from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.batch import encode_batch
from magnetar.wire.compression import compress
from magnetar.wire.entry import add_broker_entry_metadata, build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

NAME = "public/default/persistent/{}"
WANTED = {"colour": "red", "size": "L"}
CORRUPT_LZ4 = b"\xff" * 24
"""Not an LZ4 block: decompressing it raises, so reading past it proves it was skipped."""


def _kvs(props: dict[str, str]) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in props.items()]


def _single(value: bytes, props: dict[str, str], seq: int) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1, properties=_kvs(props))
    return build_entry(metadata, value)


def _batch(messages: list[dict[str, str]], seq: int, batch_props: dict[str, str], corrupt: bool) -> bytes:
    """An LZ4 batch; `corrupt` replaces its compressed bytes with garbage."""
    payload = encode_batch(
        [
            (pb.SingleMessageMetadata(sequence_id=seq + i, properties=_kvs(props)), f"{seq}-{i}".encode())
            for i, props in enumerate(messages)
        ]
    )
    metadata = pb.MessageMetadata(
        producer_name="p",
        sequence_id=seq,
        publish_time=1,
        num_messages_in_batch=len(messages),
        properties=_kvs(batch_props),
        compression=pb.LZ4,
        uncompressed_size=len(payload),
    )
    return build_entry(metadata, CORRUPT_LZ4 if corrupt else compress(pb.LZ4, payload))


def _entries(corrupt_ruled_out: bool) -> tuple[list[bytes], int]:
    """Entries of every kind the filter treats differently; returns them and how many it rules out.

    With `corrupt_ruled_out`, exactly the entries that MessageMetadata rules out are corrupt.
    """
    colours = ["red", "blue"]
    sizes = ["L", "S"]
    entries: list[bytes] = []
    ruled_out = 0
    seq = 0
    for n in range(40):
        colour, size = colours[n % 2], sizes[(n // 2) % 2]
        kind = n % 5
        if kind == 0:  # non-batched: its properties are its message's, so they decide
            props = {"colour": colour, "size": size}
            out = props != WANTED
            entries.append(_single(b"garbage" if out and corrupt_ruled_out else f"s{n}".encode(), props, seq))
            seq += 1
        elif kind == 1:  # non-batched without one of the keys
            out = True
            entries.append(_single(b"garbage" if corrupt_ruled_out else f"s{n}".encode(), {"colour": colour}, seq))
            seq += 1
        elif kind == 2:  # batch-level properties hold for every message: another value rules it out
            batch_props = {"colour": colour}
            out = colour != WANTED["colour"]
            messages = [{"colour": colour, "size": sizes[i % 2]} for i in range(5)]
            entries.append(_batch(messages, seq, batch_props, out and corrupt_ruled_out))
            seq += 5
        else:  # no batch-level properties (what the C++ client sends): decoded and filtered per row
            out = False
            messages = [{"colour": colours[i % 2], "size": sizes[(i + n) % 2], "i": str(i)} for i in range(7)]
            entries.append(_batch(messages, seq, {}, corrupt=False))
            seq += 7
        ruled_out += out
    return entries, ruled_out


def _write(data_dir: Path, topic: str, entries: list[bytes]) -> None:
    factory = ManagedLedgerFactory(data_dir)
    try:
        ml = factory.open(NAME.format(topic))
        index = -1
        for n, entry in enumerate(entries):
            index += 1  # the prefix's index is not what this test is about; any increasing one will do
            bem = pb.BrokerEntryMetadata(broker_timestamp=1_000 + n, index=index)
            ml.append_sync(add_broker_entry_metadata(entry, bem))
    finally:
        factory.close()


def _stored(entries: list[bytes]) -> list[tuple[int, int, bytes]]:
    return [(1, n, add_broker_entry_metadata(e, pb.BrokerEntryMetadata(index=n))) for n, e in enumerate(entries)]


def test_ruled_out_entries_are_neither_decompressed_nor_decoded(monkeypatch):
    entries, ruled_out = _entries(corrupt_ruled_out=True)
    assert 0 < ruled_out < len(entries)
    opened: list[int] = []
    real = table_module.decompressed_payload

    def counting(metadata, payload, *, max_size):
        opened.append(metadata.sequence_id)
        return real(metadata, payload, max_size=max_size)

    monkeypatch.setattr(table_module, "decompressed_payload", counting)
    builder = RowBuilder("persistent://public/default/t", -1, RowFilter(properties=tuple(WANTED.items())))
    for ledger_id, entry_id, data in _stored(entries):
        builder.add(ledger_id, entry_id, data)
    batch = builder.flush()
    assert builder.entries_skipped == ruled_out
    assert builder.entries_decoded == len(opened) == len(entries) - ruled_out
    assert batch is not None and batch.num_rows > 0
    assert all(dict(p) | WANTED == dict(p) for p in batch.column("properties").to_pylist())


@pytest.mark.spark
def test_same_rows_as_a_full_read_filtered_on_the_properties_column(spark, tmp_path):
    entries, _ = _entries(corrupt_ruled_out=False)
    _write(tmp_path, "props", entries)
    df = spark.read.format("magnetar").option("topic", "props").load(str(tmp_path))
    condition = " AND ".join(f"properties['{k}'] = '{v}'" for k, v in WANTED.items())
    columns = ["ledger_id", "entry_id", "batch_index", "value", "properties", "sequence_id"]
    expected = sorted(tuple(r) for r in df.where(condition).select(*columns).collect())
    filtered = df.sparkSession.read.format("magnetar").option("topic", "props")
    got = filtered.option("propertiesFilter", json.dumps(WANTED)).load(str(tmp_path)).select(*columns).collect()
    assert expected and sorted(tuple(r) for r in got) == expected


@pytest.mark.spark
def test_corrupt_entries_the_filter_rules_out_do_not_fail_the_read(spark, tmp_path):
    entries, _ = _entries(corrupt_ruled_out=True)
    _write(tmp_path, "corrupt", entries)
    reader = spark.read.format("magnetar").option("topic", "corrupt")
    rows = reader.option("propertiesFilter", json.dumps(WANTED)).load(str(tmp_path)).collect()
    assert rows and all(r["properties"]["colour"] == "red" and r["properties"]["size"] == "L" for r in rows)
    with pytest.raises(Exception, match="corrupt LZ4 payload"):
        spark.read.format("magnetar").option("topic", "corrupt").load(str(tmp_path)).collect()
