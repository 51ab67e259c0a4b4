"""Requests in, responses out: Kafka's headers around message layouts kio generates.

A request is ``size int32 | header | body``. The header is v1 (api key, version,
correlation id, client id as a nullable int16-sized string) for a non-flexible version of
its API and v2 (the same plus tagged fields) for a flexible one; a response header is v0
(correlation id) or v1 (plus tagged fields), except ApiVersions', always v0, so that a
client that does not yet know the broker's versions can read it. The body layouts come
from kio, which generates them from Kafka's JSON message definitions and reads them in
native code: a Produce request of 100 kB parses in ~3 µs and its records stay one `bytes`.

The header is read here by hand: its version depends on whether the *body's* version is
flexible, which is known only after the api key and version are read.
"""

from __future__ import annotations

import io
import struct
from functools import cache
from typing import Any, NamedTuple

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

API_VERSIONS = 18

_FIXED_HEAD = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # a response's size and correlation id


class RequestError(ValueError):
    """A request that cannot be answered as asked; `correlation_id` is None when unknown."""

    def __init__(self, message: str, correlation_id: int | None = None) -> None:
        super().__init__(message)
        self.correlation_id = correlation_id


class MalformedRequest(RequestError):
    """Bytes that are not a request of the API and version they name: the connection closes."""


class UnsupportedVersion(RequestError):
    """An API key or version the broker does not implement (Kafka's UNSUPPORTED_VERSION)."""

    def __init__(self, message: str, correlation_id: int, api_key: int, api_version: int) -> None:
        super().__init__(message, correlation_id)
        self.api_key = api_key
        self.api_version = api_version


class Request(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


@cache
def request_schema(api_key: int, version: int) -> type:
    """kio's request class for an API key and version (UnknownAPIKey / UnknownEntity if none)."""
    return load_request_schema(api_key, version)


@cache
def response_schema(api_key: int, version: int) -> type:
    return load_response_schema(api_key, version)


@cache
def _reader(schema: type) -> Any:
    return entity_reader(schema)


@cache
def _writer(schema: type) -> Any:
    return entity_writer(schema)


def _skip_tagged_fields(frame: bytes, pos: int) -> int:
    """The position after a tagged-field section (the header's carry none we use)."""
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        _, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos)
        pos += size
    if pos > len(frame):
        raise IndexError("tagged fields run past the request")
    return pos


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("an unsigned varint longer than five bytes")


def decode_request(frame: bytes, versions: dict[int, tuple[int, int]]) -> Request:
    """The request in one frame (its size prefix removed), if `versions` supports its API and version.

    UnsupportedVersion carries the correlation id, so the caller can answer an ApiVersions
    newer than it knows with v0 and its versions, as Kafka's brokers do.
    """
    if len(frame) < _FIXED_HEAD.size:
        raise MalformedRequest(f"a request of {len(frame)} bytes is shorter than a request header")
    api_key, version, correlation_id, client_id_size = _FIXED_HEAD.unpack_from(frame)
    low, high = versions.get(api_key, (1, 0))
    if not low <= version <= high:
        raise UnsupportedVersion(f"API key {api_key} version {version} is not supported", correlation_id,
                                 api_key, version)
    try:
        schema = request_schema(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedVersion(f"API key {api_key} version {version} is not supported", correlation_id,
                                 api_key, version) from None
    pos = _FIXED_HEAD.size
    try:
        client_id = None
        if client_id_size >= 0:
            client_id = frame[pos : pos + client_id_size].decode()
            pos += client_id_size
        if schema.__flexible__:
            pos = _skip_tagged_fields(frame, pos)
        if pos > len(frame):
            raise IndexError("the client id runs past the request")
        body, _ = _reader(schema)(frame, pos)
    except Exception as exc:  # kio's native reader raises several types for short or bad bytes
        raise MalformedRequest(f"API key {api_key} v{version}: {exc}", correlation_id) from exc
    return Request(api_key, version, correlation_id, client_id, body)


def encode_body(api_key: int, version: int, body: Any) -> bytes:
    """A response body alone, as encode_response writes it behind the header."""
    out = io.BytesIO()
    _writer(response_schema(api_key, version))(out, body)
    return out.getvalue()


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A framed response: size, header (v0, or v1 for a flexible version but ApiVersions'), body
    (a kio value, or bytes encode_body made: then framed without a writer, as most produce
    answers are)."""
    schema = response_schema(api_key, version)
    tagged = schema.__flexible__ and api_key != API_VERSIONS
    if isinstance(body, bytes):
        return _HEAD.pack(4 + tagged + len(body), correlation_id) + (b"\0" if tagged else b"") + body
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(_SIZE.pack(correlation_id))
    if tagged:
        out.write(b"\0")  # no tagged fields
    _writer(schema)(out, body)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    del frame
    return out.getvalue()


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A framed request, as a client writes one (the tests' and benchmarks' side of the codec)."""
    schema = request_schema(api_key, version)
    name = None if client_id is None else client_id.encode()
    out = io.BytesIO()
    out.write(_FIXED_HEAD.pack(api_key, version, correlation_id, -1 if name is None else len(name)))
    out.write(name or b"")
    if schema.__flexible__:
        out.write(b"\0")
    _writer(schema)(out, body)
    payload = out.getvalue()
    return _SIZE.pack(len(payload)) + payload


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, body) of a response frame without its size prefix (the client's side)."""
    schema = response_schema(api_key, version)
    (correlation_id,) = _SIZE.unpack_from(frame)
    pos = 4
    if schema.__flexible__ and api_key != API_VERSIONS:
        pos = _skip_tagged_fields(frame, pos)
    body, _ = _reader(schema)(frame, pos)
    return correlation_id, body
