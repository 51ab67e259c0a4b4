"""An independent oracle of Avro schema resolution for the small space the randomized tests
generate: records of primitive fields and nullable unions, evolved field by field."""

from __future__ import annotations

from typing import Any

PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
    "boolean": {"boolean"},
    "null": {"null"},
}
"""writer type -> the reader types that read it."""


def _branches(field_type: Any) -> list[str]:
    return list(field_type) if isinstance(field_type, list) else [field_type]


def _reads(reader_type: Any, writer_type: Any) -> bool:
    """Every branch the writer may write is read by some branch of the reader."""
    return all(any(r in PROMOTIONS[w] for r in _branches(reader_type)) for w in _branches(writer_type))


def can_read(reader: dict[str, Any], writer: dict[str, Any]) -> bool:
    """Does a reader of record `reader` read data written with record `writer`?"""
    written = {f["name"]: f for f in writer["fields"]}
    for field in reader["fields"]:
        source = written.get(field["name"])
        if source is None:
            if "default" not in field:
                return False
        elif not _reads(field["type"], source["type"]):
            return False
    return True
