"""Whether a new schema may join a topic's history, per compatibility strategy, as Pulsar's
registry decides it.

BACKWARD: the new schema reads what the old ones wrote. FORWARD: the old ones read what the
new one writes. FULL: both. The plain ones look at the latest version, the TRANSITIVE ones at
every version since the last delete. AVRO and JSON (an Avro schema too) are checked by Avro's
schema resolution (the `avro` package's reader/writer checker, records matched by fields
and not by name as Pulsar's Java validator matches them); primitive types only need the
same type; KEY_VALUE checks its key and its value each by its own type; PROTOBUF_NATIVE keeps
its root message; other types are refused only by ALWAYS_INCOMPATIBLE.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from magnetar.schemas.definitions import (
    is_legacy_json_schema,
    parse_avro,
    protobuf_root_message,
    split_key_value,
)
from magnetar.schemas.errors import IncompatibleSchemaError, InvalidSchemaError
from magnetar.schemas.model import CompatibilityStrategy, SchemaData, SchemaType

if TYPE_CHECKING:
    import avro.schema

S = CompatibilityStrategy
_Parsed = TypeVar("_Parsed")
_BACKWARD = frozenset({S.BACKWARD, S.BACKWARD_TRANSITIVE, S.FULL, S.FULL_TRANSITIVE})
_FORWARD = frozenset({S.FORWARD, S.FORWARD_TRANSITIVE, S.FULL, S.FULL_TRANSITIVE})
MIN_STEPS = 1000
"""A comparison may take one step per byte of the two definitions, plus this: a linear check
takes fewer (every pair of types compared has a few bytes of definition on each side), and
Java Avro's rule for unions of records named differently is quadratic."""
SHOWN_PROBLEMS = 10


def check_against_history(history: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    """Raise IncompatibleSchemaError unless `new` may follow `history` (the live versions,
    oldest first; tombstones already trimmed) under `strategy`."""
    if not history or strategy == S.ALWAYS_COMPATIBLE:
        return
    compared = history if strategy.transitive else history[-1:]
    for existing in compared:
        if existing.type != new.type:
            raise IncompatibleSchemaError(
                f"Incompatible schema: exists schema type {existing.type.name}, new schema type {new.type.name}")
    if not strategy.transitive and compared[0].same_as(new):
        return
    check_type(compared, new, strategy)


def check_type(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    """The check of `new`'s type against versions of the same type, newest last."""
    checker = _CHECKERS.get(new.type, _check_default)
    checker(existing, new, strategy)


def _check_default(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    if strategy in (S.ALWAYS_INCOMPATIBLE, S.UNDEFINED):
        raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")


def _check_avro(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    parsed = _parsed(existing, new, strategy, lambda schema: parse_avro(schema.data, schema.type))
    if parsed is None:
        return
    new_schema, olds = parsed
    for age, (old, old_schema) in enumerate(reversed(olds)):
        which = "the latest version" if age == 0 else f"the version {age} before the latest"
        budget = len(old.data) + len(new.data) + MIN_STEPS
        if strategy in _BACKWARD:
            _require_readable(new_schema, old_schema, budget, strategy,
                              f"the new schema cannot read data written with {which}")
        if strategy in _FORWARD:
            _require_readable(old_schema, new_schema, budget, strategy,
                              f"{which} cannot read data written with the new schema")


def _parsed(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy,
            parse: Callable[[SchemaData], _Parsed]) -> tuple[_Parsed, list[tuple[SchemaData, _Parsed]]] | None:
    """The new definition parsed, and each existing one beside its parsing, for a strategy
    that compares them; None when ALWAYS_COMPATIBLE needs no comparison. An unreadable
    stored definition refuses the new one."""
    if strategy == S.ALWAYS_COMPATIBLE:
        return None
    if strategy not in _BACKWARD | _FORWARD:
        raise IncompatibleSchemaError(f"Schema compatibility strategy is {strategy.name}")
    try:
        return parse(new), [(old, parse(old)) for old in existing]
    except InvalidSchemaError as exc:
        raise IncompatibleSchemaError(str(exc)) from None


def _require_readable(reader: avro.schema.Schema, writer: avro.schema.Schema, budget: int,
                      strategy: CompatibilityStrategy, what: str) -> None:
    """`budget`: the steps the comparison may take (see avro_resolution)."""
    from avro.compatibility import SchemaCompatibilityType  # noqa: PLC0415 (loaded with the first Avro schema)

    from magnetar.schemas.avro_resolution import PulsarCompatibilityChecker, TooComplexError  # noqa: PLC0415

    try:
        result = PulsarCompatibilityChecker(budget).get_compatibility(reader, writer)
    except TooComplexError:
        raise IncompatibleSchemaError(
            f"Incompatible schema with strategy {strategy.name}: {what}: the two schemas are too complex to "
            f"compare (more than {budget} pairs of types)") from None
    except RecursionError:
        raise IncompatibleSchemaError(
            f"Incompatible schema with strategy {strategy.name}: {what}: the schemas are nested too deeply to "
            f"compare") from None
    if result.compatibility is not SchemaCompatibilityType.compatible:
        details = _listed(result.messages, "; ")
        where = _listed(result.locations, ", ")
        raise IncompatibleSchemaError(
            f"Incompatible schema with strategy {strategy.name}: {what}: {details} (at {where})")


def _listed(items: Iterable[str], separator: str) -> str:
    """The first SHOWN_PROBLEMS of `items` in order, and how many more there are: a refusal of a
    16,000-field record listed them all (350 KB of error message)."""
    ordered = sorted(items)
    shown = separator.join(ordered[:SHOWN_PROBLEMS])
    return shown if len(ordered) <= SHOWN_PROBLEMS else f"{shown}{separator}and {len(ordered) - SHOWN_PROBLEMS} more"


def _check_json(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    """JSON definitions are Avro schemas; one in the older JSON-Schema form is let through in
    either direction (it replaces or is replaced), as Pulsar lets it, and two of that form
    must agree on their `id`."""
    if is_legacy_json_schema(new.data) or any(is_legacy_json_schema(old.data) for old in existing):
        _check_legacy_json(existing, new)
        return
    _check_avro(existing, new, strategy)


def _check_legacy_json(existing: Sequence[SchemaData], new: SchemaData) -> None:
    for old in existing:
        if is_legacy_json_schema(old.data) and is_legacy_json_schema(new.data) and \
                json.loads(old.data).get("id") != json.loads(new.data).get("id"):
            raise IncompatibleSchemaError("Incompatible schema: the two JSON-Schema definitions have different ids")


def _check_protobuf_native(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    parsed = _parsed(existing, new, strategy, lambda schema: protobuf_root_message(schema.data))
    if parsed is None:
        return
    root, old_roots = parsed
    for _, old_root in old_roots:
        if old_root != root:
            raise IncompatibleSchemaError(
                f"Incompatible schema: the Protobuf root message may not change ({old_root} -> {root})")


def _check_key_value(existing: Sequence[SchemaData], new: SchemaData, strategy: CompatibilityStrategy) -> None:
    try:
        new_key, new_value = split_key_value(new)
        olds = [split_key_value(old) for old in existing]
    except InvalidSchemaError as exc:
        raise IncompatibleSchemaError(str(exc)) from None
    for old_key, old_value in olds:
        for side, old, current in (("key", old_key, new_key), ("value", old_value, new_value)):
            if old.type != current.type:
                raise IncompatibleSchemaError(f"Incompatible KEY_VALUE schema: the {side} type changes from "
                                              f"{old.type.name} to {current.type.name}")
            if not old.same_as(current):
                try:
                    check_type([old], current, strategy)
                except IncompatibleSchemaError as exc:
                    raise IncompatibleSchemaError(f"Incompatible KEY_VALUE schema, {side}: {exc}") from None


_Checker = Callable[[Sequence[SchemaData], SchemaData, CompatibilityStrategy], None]
_CHECKERS: dict[SchemaType, _Checker] = {
    SchemaType.AVRO: _check_avro,
    SchemaType.JSON: _check_json,
    SchemaType.PROTOBUF_NATIVE: _check_protobuf_native,
    SchemaType.KEY_VALUE: _check_key_value,
}
