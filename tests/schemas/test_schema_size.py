"""What a large definition costs, bounded (issue 40, item 8): the field limit at its edge,
what a refusal of thousands of problems shows, the step budget of Java Avro's quadratic
union rule, the work of a check growing in proportion to the schemas (counted in lines of
Python executed, not timed), and the parse cache bounded by the bytes it was made from."""

from __future__ import annotations

import inspect
import json
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from magnetar.schemas import CompatibilityStrategy, IncompatibleSchemaError, InvalidSchemaError, SchemaData, SchemaType
from magnetar.schemas.bounded_cache import BoundedCache
from magnetar.schemas.compatibility import MIN_STEPS, check_against_history
from magnetar.schemas.definitions import avro_members, join_key_value, parse_avro, validate

S = CompatibilityStrategy


def wide(fields: int, field_type: Any = "long", *, name: str = "Wide", prefix: str = "f") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": f"{prefix}{i}", "type": field_type}
                                                       for i in range(fields)]}


def avro(definition: object, kind: SchemaType = SchemaType.AVRO) -> SchemaData:
    return SchemaData(kind, json.dumps(definition).encode())


def test_members_are_the_elements_of_every_array() -> None:
    definition = {"type": "record", "name": "R", "aliases": ["Q"], "fields": [
        {"name": "a", "type": ["null", "int"]},
        {"name": "b", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y", "Z"]}},
    ]}
    assert avro_members(json.dumps(definition).encode()) == 1 + 2 + 2 + 3
    assert avro_members(b'"string"') == 0
    assert avro_members(b"{not json") is None


@pytest.mark.parametrize("kind", [SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF])
def test_the_field_limit_at_its_edge(kind: SchemaType) -> None:
    validate(avro(wide(100), kind), max_fields=100)
    with pytest.raises(InvalidSchemaError, match=rf"^Invalid schema definition data for {kind.name} schema: 101 "
                                                 r"fields, union branches and symbols, more than the 100 the broker "
                                                 r"takes \(schemaMaxFields\)$"):
        validate(avro(wide(101), kind), max_fields=100)
    validate(avro(wide(101), kind))  # no limit given: none applies


def test_the_limit_is_counted_before_anything_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    import avro.schema as avro_schema  # noqa: PLC0415

    monkeypatch.setattr(avro_schema, "parse", lambda *_a, **_k: pytest.fail("parsed"))
    with pytest.raises(InvalidSchemaError, match="more than the 10 the broker takes"):
        validate(avro(wide(11, prefix="unparsed")), max_fields=10)


def test_each_side_of_a_key_value_schema_has_the_limit() -> None:
    small, large = avro(wide(5)), avro(wide(50))
    validate(join_key_value(small, small), max_fields=10)
    for key, value in ((large, small), (small, large)):
        with pytest.raises(InvalidSchemaError, match="50 fields, union branches and symbols, more than the 10"):
            validate(join_key_value(key, value), max_fields=10)


def test_a_refusal_of_thousands_of_problems_names_ten() -> None:
    """Each of 3,000 reader fields lacks its writer field and a default: the message shows the
    first ten problems and locations in order, and how many more there are."""
    old, new = avro(wide(3000, prefix="a")), avro(wide(3000, prefix="b"))
    with pytest.raises(IncompatibleSchemaError) as refused:
        check_against_history([old], new, S.BACKWARD)
    shown = sorted(f"b{i}" for i in range(3000))[:10]
    where = sorted(f"/fields/{i}" for i in range(3000))[:10]
    assert str(refused.value) == (f"Incompatible schema with strategy BACKWARD: the new schema cannot read data "
                                  f"written with the latest version: {'; '.join(shown)}; and 2990 more "
                                  f"(at {', '.join(where)}, and 2990 more)")


def _records(prefix: str, count: int, field: str = "x") -> list[dict[str, Any]]:
    return [{"type": "record", "name": f"{prefix}{i}", "fields": [{"name": field, "type": "int"}]}
            for i in range(count)]


def test_unions_of_records_named_apart_are_too_complex_past_the_budget() -> None:
    """Java Avro tries each writer record on each reader record when no name matches, until
    one reads it: with a few hundred that none reads, that outgrows the definitions, and is
    refused, not computed."""
    old = avro({"type": "record", "name": "R", "fields": [{"name": "u", "type": _records("A", 300, "y")}]})
    renamed = avro({"type": "record", "name": "R", "fields": [{"name": "u", "type": _records("B", 300)}]})
    budget = len(old.data) + len(renamed.data) + MIN_STEPS
    with pytest.raises(IncompatibleSchemaError, match=rf"^Incompatible schema with strategy BACKWARD: the new schema "
                                                      rf"cannot read data written with the latest version: the two "
                                                      rf"schemas are too complex to compare \(more than {budget} pairs "
                                                      rf"of types\)$"):
        check_against_history([old], renamed, S.BACKWARD)
    few = avro({"type": "record", "name": "R", "fields": [{"name": "u", "type": _records("B", 20)}]})
    check_against_history([avro({"type": "record", "name": "R", "fields": [{"name": "u", "type": _records("A", 20)}]})],
                          few, S.FULL)  # the same rule on a few: records that read each other


def test_the_step_budget_at_its_edge() -> None:
    """A record of three fields against itself takes four steps: one per pair of types."""
    from magnetar.schemas.avro_resolution import PulsarCompatibilityChecker, TooComplexError  # noqa: PLC0415

    record = parse_avro(json.dumps(wide(3)).encode())
    other = parse_avro(json.dumps(wide(3, "int")).encode())
    PulsarCompatibilityChecker(4).get_compatibility(record, other)
    with pytest.raises(TooComplexError):
        PulsarCompatibilityChecker(3).get_compatibility(record, other)


def test_a_check_that_outgrows_the_stack_is_refused_not_failed() -> None:
    """Arrays nested 100 deep, parsed, then compared with little stack left: the check is
    refused with its reason (RecursionError would have been an internal error)."""
    def nested(item: str) -> SchemaData:
        definition: object = item
        for _ in range(100):
            definition = {"type": "array", "items": definition}
        return avro(definition)

    old, new = nested("int"), nested("long")
    parse_avro(old.data), parse_avro(new.data)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 150)
    try:
        with pytest.raises(IncompatibleSchemaError, match=r"^Incompatible schema with strategy BACKWARD: the new "
                                                          r"schema cannot read data written with the latest version: "
                                                          r"the schemas are nested too deeply to compare$"):
            check_against_history([old], new, S.BACKWARD)
    finally:
        sys.setrecursionlimit(limit)


def test_names_are_not_held_to_avro_s_strict_rule() -> None:
    """Java clients name inner classes with `$`; Pulsar's broker takes them (a name nothing
    parsed before, so no cached result answers)."""
    validate(avro(wide(1, name=f"Outer${uuid.uuid4().hex}")))


def _lines_run(action: Callable[[], object]) -> int:
    """Lines of Python executed by `action` (every frame traced)."""
    count = 0

    def trace(_frame: object, event: str, _arg: object) -> Callable[..., object]:
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        action()
    finally:
        sys.settrace(None)
    return count


def _with_optional(definition: dict[str, Any]) -> dict[str, Any]:
    return {**definition, "fields": [*definition["fields"], {"name": "extra", "type": ["null", "int"],
                                                             "default": None}]}


WIDE_RECORD = ("a wide record", wide)
WIDE_UNION = ("a union of many named records", lambda n: {"type": "record", "name": "R", "fields": [
    {"name": "u", "type": _records(f"U{n}_", n // 10)}]})
ONE_WRITER_MANY_READERS = ("a wide record tried against many records of its short name", lambda n: {
    "type": "record", "name": "R", "fields": [{"name": "u", "type": {**wide(n, name="W"), "namespace": "w"}}]})


def _many_readers(n: int) -> dict[str, Any]:
    """The reader of ONE_WRITER_MANY_READERS: a union of n / 10 one-field records named W in
    other namespaces, each tried on the writer's W (same short name, other full name)."""
    return {"type": "record", "name": "R", "fields": [{"name": "u", "type": [
        {"type": "record", "name": "W", "namespace": f"r{i}", "fields": [{"name": "f0", "type": "long"}]}
        for i in range(n // 10)]}]}


@pytest.mark.parametrize(("what", "make"), [WIDE_RECORD, WIDE_UNION, ONE_WRITER_MANY_READERS],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_the_work_of_a_check_grows_in_proportion_to_the_schemas(what: str, make: Callable[[int], dict]) -> None:
    """Twice the fields (or branches), about twice the work: the `avro` package's checker
    looked each reader field up in a table it rebuilt per field, and its pair memo collided
    on most pairs of a wide record, both quadratic."""
    work = {}
    for size in (1000, 2000):
        reader = _many_readers(size) if make is ONE_WRITER_MANY_READERS[1] else _with_optional(make(size))
        old, new = avro(make(size)), avro(reader)
        parse_avro(old.data), parse_avro(new.data)  # parsed before: what is counted is the comparison
        work[size] = _lines_run(lambda old=old, new=new: check_against_history([old], new, S.BACKWARD))
    assert work[2000] < 2.3 * work[1000], (what, work)


def _refused(old: SchemaData, new: SchemaData) -> None:
    with pytest.raises(IncompatibleSchemaError):
        check_against_history([old], new, S.BACKWARD)


def test_the_work_of_gathering_problems_grows_in_proportion_to_them() -> None:
    work = {}
    for size in (1000, 2000):
        old, new = avro(wide(size)), avro(wide(size, "string"))
        parse_avro(old.data), parse_avro(new.data)
        work[size] = _lines_run(lambda old=old, new=new: _refused(old, new))
    assert work[2000] < 2.3 * work[1000], work


def test_the_parse_cache_is_bounded_by_the_bytes_of_what_it_holds() -> None:
    computed: list[str] = []
    cache: BoundedCache[str] = BoundedCache(max_entries=10, max_bytes=100)

    def get(key: str, size: int) -> str:
        return cache.get(key, size, lambda: computed.append(key) or key.upper())

    assert [get("a", 40), get("b", 40), get("a", 40)] == ["A", "B", "A"]
    assert computed == ["a", "b"]
    get("c", 40)  # 120 bytes: the least recently used (b) goes
    assert len(cache) == 2
    get("a", 40), get("b", 40)
    assert computed == ["a", "b", "c", "b"]
    assert get("huge", 101) == "HUGE" and get("huge", 101) == "HUGE"  # larger than the whole: never kept
    assert computed[-2:] == ["huge", "huge"]
    for key in "defghijklmn":
        get(key, 1)
    assert len(cache) == 10
