"""A topic's schema versions, from where the source already reads the topic.

With `path` they come from the registry's keys in the data directory's metadata store (read
only, as the broker wrote them); with `service.url` from the broker with GET_SCHEMA, the
command the official clients use to fetch a writer's schema. The driver finds them once per
query (`value_schemas`) and the reader carries them to executors: with `path` every live
version (one local read), over `service.url` the latest (one GET_SCHEMA a topic, no version
named). A version a message names that the reader does not carry (an older one over
`service.url`, or one registered since, which a stream meets) is fetched when met, once per
version and process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from magnetar.client.connection import ClientConnection, PulsarServerError
from magnetar.schemas import SchemaData, SchemaNotFoundError, SchemaRegistry, schema_id, version_bytes
from magnetar.schemas.protocol import from_wire
from magnetar.spark.options import MagnetarOptionError, SourceOptions
from magnetar.spark.storage_reader import open_data_dir
from magnetar.spark.value_decoding import WriterLookup
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

T = pb.BaseCommand
Versions = dict[int, SchemaData]

_fetched: dict[tuple[str, str, int], SchemaData | None] = {}
_fetched_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class ValueSchemas:
    """What typed reads decode with, found by the driver and pickled with the reader."""

    latest: SchemaData
    """The schema typing the `value` column: every topic's latest version (they must agree)."""
    known: dict[str, Versions]
    """Per topic, the versions found with it: executors look nothing up for these."""

    def writers(self, options: SourceOptions, topic: str) -> WriterLookup:
        """A version of `topic` -> its schema: known ones at once, others fetched when met."""
        known = self.known.get(topic, {})

        def lookup(version: int) -> SchemaData | None:
            found = known.get(version)
            return found if found is not None else _fetched_version(options, topic, version)

        return lookup


def value_schemas(options: SourceOptions, topics: list[str]) -> ValueSchemas | None:
    """The topics' schema versions, None when none has a schema. Every topic read must have the
    same latest version (or none has one)."""
    found = _path_versions(options, topics) if options.path is not None else _latest_versions(options, topics)
    latest = {topic: versions[max(versions)] if versions else None for topic, versions in found.items()}
    distinct = {None if s is None else (s.type, s.identity) for s in latest.values()}
    if len(distinct) > 1:
        described = ", ".join(f"{t}: {'no schema' if s is None else s.type.name}" for t, s in latest.items())
        raise MagnetarOptionError(
            f"the topics read have different schemas ({described}): read them one query each, or give option "
            "valueFormat=bytes for the raw payloads")
    schema = next(iter(latest.values()), None)
    return None if schema is None else ValueSchemas(schema, found)


def _path_versions(options: SourceOptions, topics: list[str]) -> dict[str, Versions]:
    assert options.path is not None
    registry = SchemaRegistry(open_data_dir(options.path).metadata_store)
    return {t: {v.version: v.schema for v in registry.live(schema_id(TopicName.parse(t)))} for t in topics}


def _latest_versions(options: SourceOptions, topics: list[str]) -> dict[str, Versions]:
    """Each topic's latest version: one GET_SCHEMA a topic, on one connection."""
    assert options.service_url is not None
    out: dict[str, Versions] = {}
    with ClientConnection(options.service_url, timeout=options.operation_timeout_seconds,
                          security=options.security) as conn:
        for topic in topics:
            found = _get_schema(conn, topic, None)
            out[topic] = {} if found is None else {found[0]: found[1]}
    return out


def _fetched_version(options: SourceOptions, topic: str, version: int) -> SchemaData | None:
    """Schema `version` of `topic` (None when the registry no longer has it), fetched once per
    process: Spark reuses its Python workers across tasks and queries, and a version never
    changes once registered."""
    key = (options.path or options.service_url or "", topic, version)
    with _fetched_lock:
        if key in _fetched:
            return _fetched[key]
    found = _fetch_version(options, topic, version)
    with _fetched_lock:
        _fetched[key] = found
    return found


def _fetch_version(options: SourceOptions, topic: str, version: int) -> SchemaData | None:
    if options.path is not None:
        registry = SchemaRegistry(open_data_dir(options.path).metadata_store)
        try:
            return registry.get(schema_id(TopicName.parse(topic)), version).schema
        except SchemaNotFoundError:
            return None
    assert options.service_url is not None
    with ClientConnection(options.service_url, timeout=options.operation_timeout_seconds,
                          security=options.security) as conn:
        found = _get_schema(conn, topic, version)
    return None if found is None else found[1]


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
