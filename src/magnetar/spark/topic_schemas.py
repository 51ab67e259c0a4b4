"""A topic's schema versions, from where the source already reads the topic.

With `path` they come from the registry's keys in the data directory's metadata store (read
only, as the broker wrote them); with `service.url` from the broker with GET_SCHEMA, the
command the official clients use to fetch a writer's schema. The driver asks for the latest
version (the `value` column's type); executors ask for the versions their messages were
written with, once per version and process, and again when a message names a version
registered after they last asked (a stream meets those).
"""

from __future__ import annotations

import threading

from magnetar.client.connection import ClientConnection, PulsarServerError
from magnetar.schemas import SchemaData, SchemaRegistry, schema_id, version_bytes
from magnetar.schemas.protocol import from_wire
from magnetar.spark.options import MagnetarOptionError, SourceOptions
from magnetar.spark.storage_reader import open_data_dir
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

T = pb.BaseCommand
Versions = dict[int, SchemaData]

_cache: dict[tuple[str, str], Versions] = {}
_cache_lock = threading.Lock()


def fetch_versions(options: SourceOptions, topic: str) -> Versions:
    """Every live version of `topic`'s schema (empty when it has none), asked anew."""
    if options.path is not None:
        registry = SchemaRegistry(open_data_dir(options.path).metadata_store)
        return {v.version: v.schema for v in registry.live(schema_id(TopicName.parse(topic)))}
    assert options.service_url is not None
    with ClientConnection(options.service_url, timeout=options.operation_timeout_seconds,
                          security=options.security) as conn:
        latest = _get_schema(conn, topic, None)
        if latest is None:
            return {}
        newest, schema = latest
        out = {newest: schema}
        for version in range(newest):
            found = _get_schema(conn, topic, version)
            if found is not None:
                out[version] = found[1]
        return out


def _get_schema(conn: ClientConnection, topic: str, version: int | None) -> tuple[int, SchemaData] | None:
    """GET_SCHEMA: (version, schema), None when there is no such (live) version."""
    request = pb.CommandGetSchema(request_id=conn.new_request_id(), topic=topic)
    if version is not None:
        request.schema_version = version_bytes(version)
    try:
        response = conn.request(T(type=T.GET_SCHEMA, getSchema=request)).getSchemaResponse
    except PulsarServerError as exc:
        if exc.code == pb.TopicNotFound:  # Pulsar's answer for "no such schema (version)"
            return None
        raise
    schema = from_wire(response.schema)
    if schema is None:
        return None
    return int.from_bytes(response.schema_version, "big", signed=True), schema


def latest_schema(options: SourceOptions, topics: list[str]) -> SchemaData | None:
    """The schema the `value` column is typed with: the topics' latest version, which must be
    the same for every topic read (or none has one)."""
    found: dict[str, SchemaData | None] = {}
    for topic in topics:
        versions = fetch_versions(options, topic)
        found[topic] = versions[max(versions)] if versions else None
    distinct = {None if s is None else (s.type, s.identity) for s in found.values()}
    if len(distinct) > 1:
        described = ", ".join(f"{t}: {'no schema' if s is None else s.type.name}" for t, s in found.items())
        raise MagnetarOptionError(
            f"the topics read have different schemas ({described}): read them one query each, or give option "
            "valueFormat=bytes for the raw payloads")
    return next(iter(found.values()), None)


def writer_schema(options: SourceOptions, topic: str, version: int) -> SchemaData | None:
    """The schema `version` of `topic`, cached for the process; None when the registry does
    not have it (deleted since)."""
    key = (options.path or options.service_url or "", topic)
    with _cache_lock:
        versions = _cache.get(key)
    if versions is None or version not in versions:
        versions = fetch_versions(options, topic)
        with _cache_lock:
            _cache[key] = versions
    return versions.get(version)
