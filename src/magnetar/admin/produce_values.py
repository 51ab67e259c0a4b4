"""Turning a REST producer's message values into the bytes a Pulsar producer with the same
schema would send: the request carries JSON, the topic's consumers expect their schema's
encoding.

- no schema, or STRING: the payload is text, stored as UTF-8 (Pulsar's REST producer
  defaults to the String schema);
- BYTES: the payload is base64;
- JSON and AVRO: the payload is the record, as a JSON value or a string holding one; it is
  checked against the schema's Avro definition and stored as JSON text or Avro binary.

Anything that does not fit is a ValueError naming the message and why (the route's 400).
fastavro is imported by the first schema'd value, not by the broker's start-up.
"""

from __future__ import annotations

import binascii
import io
import json
from collections.abc import Callable
from typing import Any

from magnetar.schemas import SchemaData, SchemaType

Encoder = Callable[[Any], bytes]


def encoder_for(schema: SchemaData | None) -> Encoder:
    """How payloads become stored bytes under `schema` (None: the topic has no schema)."""
    kind = SchemaType.STRING if schema is None else schema.type
    if kind in (SchemaType.STRING, SchemaType.NONE):
        return _text
    if kind == SchemaType.BYTES:
        return _base64
    if kind in (SchemaType.AVRO, SchemaType.JSON):
        assert schema is not None
        return _record_encoder(schema)
    raise ValueError(f"the REST producer does not encode {kind.name} values: use STRING, BYTES, JSON or AVRO")


def _text(payload: Any) -> bytes:
    if not isinstance(payload, str):
        raise ValueError("payload must be a string")
    return payload.encode()


def _base64(payload: Any) -> bytes:
    if not isinstance(payload, str):
        raise ValueError("payload must be a base64 string")
    try:
        return binascii.a2b_base64(payload, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"payload is not base64: {exc}") from None


def _record_encoder(schema: SchemaData) -> Encoder:
    import fastavro  # noqa: PLC0415 (see the module's docstring)
    from fastavro.validation import ValidationError, validate  # noqa: PLC0415

    try:
        parsed = fastavro.parse_schema(json.loads(schema.data))
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ValueError(f"the topic's {schema.type.name} schema has no Avro definition this broker reads: {exc}") \
            from None
    as_avro = schema.type == SchemaType.AVRO

    def encode(payload: Any) -> bytes:
        value = _record(payload)
        try:
            validate(value, parsed, raise_errors=True)
        except (ValidationError, ValueError, TypeError) as exc:
            raise ValueError(f"payload does not fit the topic's {schema.type.name} schema: {exc}") from None
        if not as_avro:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, value)
        return out.getvalue()

    return encode


def _record(payload: Any) -> Any:
    """A record given as a JSON value, or as a string holding one (as Pulsar's clients send it)."""
    if not isinstance(payload, str):
        return payload
    try:
        return json.loads(payload)
    except (ValueError, RecursionError):
        raise ValueError("payload is a string that holds no JSON record") from None
