"""The registry on a real SQLite metadata store: versions from 0, lookups, tombstones,
auto-update, consumers' checks, a reopened store, a read-only reader."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import avro.schema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.schemas import (
    CompatibilityStrategy,
    IncompatibleSchemaError,
    InvalidSchemaError,
    SchemaData,
    SchemaNotFoundError,
    SchemaRegistry,
    SchemaType,
    schema_id,
)
from magnetar.storage import SqliteMetadataStore
from magnetar.wire.topic_name import TopicName

S = CompatibilityStrategy
SID = "public/default/users"


def user(*extra: dict[str, object]) -> SchemaData:
    fields = [{"name": "name", "type": "string"}, *extra]
    return SchemaData(SchemaType.AVRO, json.dumps({"type": "record", "name": "User", "fields": fields}).encode())


V0 = user()
V1 = user({"name": "age", "type": ["null", "int"], "default": None})
INCOMPATIBLE = user({"name": "age", "type": "int"})


@pytest.fixture
def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = SqliteMetadataStore(tmp_path / "metadata.db")
    yield s
    s.close()


@pytest.fixture
def registry(store: SqliteMetadataStore) -> SchemaRegistry:
    return SchemaRegistry(store, clock=lambda: 1700000000.5)


def test_partitions_share_one_schema_id() -> None:
    topic = TopicName.parse("persistent://t/ns/orders")
    assert schema_id(topic) == "t/ns/orders"
    assert schema_id(topic.partition(3)) == "t/ns/orders"
    assert schema_id(TopicName.parse("non-persistent://t/ns/orders")) == "t/ns/orders"


def test_versions_count_from_zero_and_equal_schemas_reuse_theirs(registry: SchemaRegistry) -> None:
    assert registry.put_if_absent(SID, V0, S.FULL) == 0
    assert registry.put_if_absent(SID, V1, S.FULL) == 1
    reformatted = SchemaData(SchemaType.AVRO, json.dumps(json.loads(V0.data), indent=4).encode())
    assert registry.put_if_absent(SID, reformatted, S.FULL) == 0
    assert registry.get(SID).version == 1
    assert registry.get(SID, 0).schema.data == V0.data
    assert registry.get(SID, 0).schema.timestamp == 1700000000500
    assert registry.find_version(SID, V1) == 1
    assert registry.find_version(SID, INCOMPATIBLE) is None


def test_incompatible_and_invalid_schemas_are_refused_and_not_stored(registry: SchemaRegistry) -> None:
    registry.put_if_absent(SID, V1, S.FULL)
    with pytest.raises(IncompatibleSchemaError, match="strategy FULL"):
        registry.put_if_absent(SID, INCOMPATIBLE, S.FULL)
    with pytest.raises(InvalidSchemaError, match="AVRO schema"):
        registry.put_if_absent(SID, SchemaData(SchemaType.AVRO, b"{"), S.ALWAYS_COMPATIBLE)
    assert [v.version for v in registry.history(SID)] == [0]
    assert registry.put_if_absent(SID, INCOMPATIBLE, S.ALWAYS_COMPATIBLE) == 1


def test_undefined_means_full(registry: SchemaRegistry) -> None:
    registry.put_if_absent(SID, V1, S.UNDEFINED)
    with pytest.raises(IncompatibleSchemaError, match="strategy FULL"):
        registry.put_if_absent(SID, INCOMPATIBLE, S.UNDEFINED)


def test_without_auto_update_only_known_versions_pass(registry: SchemaRegistry) -> None:
    with pytest.raises(IncompatibleSchemaError, match="auto updating is disabled"):
        registry.put_if_absent(SID, V0, S.FULL, allow_auto_update=False)
    registry.put_if_absent(SID, V0, S.FULL)
    assert registry.put_if_absent(SID, V0, S.FULL, allow_auto_update=False) == 0
    with pytest.raises(IncompatibleSchemaError, match="auto updating is disabled"):
        registry.put_if_absent(SID, V1, S.FULL, allow_auto_update=False)


def test_delete_writes_a_tombstone_and_a_new_history_starts_after_it(registry: SchemaRegistry) -> None:
    registry.put_if_absent(SID, V1, S.FULL)
    assert registry.delete(SID, "admin") == 1
    assert not registry.has_schema(SID)
    with pytest.raises(SchemaNotFoundError):
        registry.get(SID)
    with pytest.raises(SchemaNotFoundError, match="schema version 0"):
        registry.get(SID, 0)
    tombstone = registry.history(SID)[1].schema
    assert tombstone.deleted and tombstone.user == "admin"
    # the history before the tombstone no longer constrains anything
    assert registry.put_if_absent(SID, INCOMPATIBLE, S.FULL) == 2


def test_delete_all_forgets_every_version(registry: SchemaRegistry, store: SqliteMetadataStore) -> None:
    registry.put_if_absent(SID, V0, S.FULL)
    registry.put_if_absent("public/default/other", V0, S.FULL)
    registry.delete_all(SID)
    assert registry.history(SID) == []
    assert store.list("/schemas/public/default/users/") == []
    assert registry.put_if_absent(SID, INCOMPATIBLE, S.FULL) == 0
    assert registry.get("public/default/other").version == 0


def test_consumer_checks(registry: SchemaRegistry) -> None:
    with pytest.raises(SchemaNotFoundError):
        registry.check_consumer(SID, V0, S.FULL)
    registry.put_if_absent(SID, V0, S.FULL)
    registry.check_consumer(SID, V1, S.FULL)  # a reader that adds an optional field reads V0 data
    with pytest.raises(IncompatibleSchemaError):
        registry.check_consumer(SID, INCOMPATIBLE, S.FORWARD)  # checked BACKWARD: age has no default
    registry.check_consumer(SID, INCOMPATIBLE, S.ALWAYS_COMPATIBLE)
    with pytest.raises(IncompatibleSchemaError):
        registry.check_consumer(SID, V1, S.ALWAYS_INCOMPATIBLE)


def test_versions_survive_a_reopened_store_and_a_read_only_reader_sees_them(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    writer = SqliteMetadataStore(path)
    SchemaRegistry(writer).put_if_absent(SID, V0, S.FULL)
    reader_store = SqliteMetadataStore(path, read_only=True)
    SchemaRegistry(writer).put_if_absent(SID, V1, S.FULL)
    assert [v.version for v in SchemaRegistry(reader_store).live(SID)] == [0, 1]
    writer.close()
    reader_store.close()
    reopened = SqliteMetadataStore(path)
    registry = SchemaRegistry(reopened)
    assert registry.get(SID).schema == SchemaData(SchemaType.AVRO, V1.data, {}, "", registry.get(SID).schema.timestamp)
    assert registry.put_if_absent(SID, V1, S.FULL) == 1
    reopened.close()


@settings(max_examples=40)
@given(st.lists(st.sampled_from(["put0", "put1", "bad", "delete"]), min_size=1, max_size=12))
def test_version_numbers_only_grow(tmp_path_factory: pytest.TempPathFactory, steps: list[str]) -> None:
    """Whatever is put, refused and deleted, numbers are handed out once each, in order, and
    the live list is what followed the last tombstone."""
    store = SqliteMetadataStore(tmp_path_factory.mktemp("registry") / "metadata.db")
    registry = SchemaRegistry(store)
    issued: list[int] = []
    for step in steps:
        if step == "delete":
            issued.append(registry.delete(SID))
            continue
        schema = {"put0": V0, "put1": V1, "bad": INCOMPATIBLE}[step]
        try:
            version = registry.put_if_absent(SID, schema, S.BACKWARD)
        except IncompatibleSchemaError:
            continue
        if version not in issued:
            issued.append(version)
    assert issued == list(range(len(issued)))
    reread = SchemaRegistry(store)
    assert [v.version for v in reread.history(SID)] == issued
    assert reread.live(SID) == registry.live(SID)
    store.close()


def test_each_definition_is_parsed_once_however_many_producers_come(registry: SchemaRegistry,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A producer's schema is compared with every live version: the comparisons reuse what was
    parsed (by definition and type), so producers of known versions parse nothing and a new
    version parses only itself, whatever the number of live versions."""
    parses: list[str] = []
    real_parse = avro.schema.parse
    monkeypatch.setattr(avro.schema, "parse", lambda text, **kw: parses.append(text) or real_parse(text, **kw))
    namespace = f"n{uuid.uuid4().hex}"  # definitions no earlier test parsed

    def version(fields: int) -> SchemaData:
        extra = [{"name": f"f{i}", "type": ["null", "int"], "default": None} for i in range(fields)]
        definition = {"type": "record", "name": "E", "namespace": namespace, "fields": extra}
        return SchemaData(SchemaType.AVRO, json.dumps(definition).encode())

    for fields in range(12):
        registry.put_if_absent(SID, version(fields), S.FULL_TRANSITIVE)
    assert len(parses) == 12
    parses.clear()
    for _ in range(5):
        for fields in range(12):  # fresh bytes, as each CommandProducer brings them
            again = version(fields)
            assert registry.put_if_absent(SID, SchemaData(again.type, bytes(bytearray(again.data))),
                                          S.FULL_TRANSITIVE) == fields
    assert parses == []
    registry.put_if_absent(SID, version(12), S.FULL_TRANSITIVE)
    assert len(parses) == 1
