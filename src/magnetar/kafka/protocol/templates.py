"""Responses that differ only in some int64 fields: encoded by kio once per shape, then filled in.

A produce response carries each partition's base offset and little else that changes from
one request to the next, yet encoding it through kio's writer cost about as much as the
rest of the produce. So each shape (version and the partitions answered) is encoded once
with a distinct placeholder in every field that varies, and a response of that shape is
those bytes with the placeholders overwritten: the layout is still kio's.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from magnetar.kafka.protocol.messages import encode_body

_INT64 = struct.Struct(">q")
_PLACEHOLDER = 0x7E1D_CAFE_0000_0000  # plus the field's index: no plausible offset, and unique
_MAX_SHAPES = 1024


class Int64Templates:
    """Encoded bodies of one API, per shape, with where each varying int64 field lies."""

    def __init__(self, api_key: int) -> None:
        self._api_key = api_key
        self._shapes: dict[Hashable, tuple[bytes, tuple[int, ...]] | None] = {}

    def fill(self, version: int, shape: Hashable, values: Sequence[int],
             build: Callable[[Sequence[int]], Any]) -> bytes | None:
        """The body `build(values)` would encode to, from the shape's template; None if the
        placeholders could not be told apart in it (then encode `build(values)` itself)."""
        key = (version, shape)
        if key not in self._shapes:
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()
            self._shapes[key] = self._template(version, len(values), build)
        template = self._shapes[key]
        if template is None:
            return None
        encoded, positions = template
        filled = bytearray(encoded)
        for position, value in zip(positions, values, strict=True):
            _INT64.pack_into(filled, position, value)
        return bytes(filled)

    def _template(self, version: int, count: int, build: Callable[[Sequence[int]], Any]) -> \
            tuple[bytes, tuple[int, ...]] | None:
        placeholders = [_PLACEHOLDER + i for i in range(count)]
        encoded = encode_body(self._api_key, version, build(placeholders))
        marks = [_INT64.pack(p) for p in placeholders]
        if any(encoded.count(mark) != 1 for mark in marks):
            return None
        return encoded, tuple(encoded.index(mark) for mark in marks)
