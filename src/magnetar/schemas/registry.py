"""The schema registry: per topic (every partition shares it), an ordered list of schema
versions in the metadata store, as Pulsar's SchemaRegistryService keeps it.

Versions are numbered from 0 and never reused while the topic lives: deleting a topic's
schema appends a tombstone, which takes a number, and only the versions after the last
tombstone count. Deleting the topic forgets the whole list. Each version is one key
(`/schemas/{tenant}/{ns}/{topic}/{version as 16 hex digits}`), so appending is one write,
and a read-only process (a Spark reader) sees what the broker wrote.

Plain, blocking calls: the metadata store is local and schema registrations are rare (a
producer's or consumer's creation, an admin request). What costs in proportion to a
definition's size (parsing, comparing) is in the `decide_*` methods: pure functions of a
topic's live versions, which a caller may run on another thread while it keeps serving, then
append with `append` if the live versions are still those it decided on.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.schemas.bounded_cache import BoundedCache
from magnetar.schemas.compatibility import check_against_history
from magnetar.schemas.definitions import PARSED_BYTES, PARSED_LIMIT, parse_avro, validate
from magnetar.schemas.errors import IncompatibleSchemaError, InvalidSchemaError, SchemaNotFoundError
from magnetar.schemas.model import CompatibilityStrategy, SchemaData, SchemaType
from magnetar.storage import MetadataStore
from magnetar.wire.topic_name import TopicName

_PREFIX = "/schemas/"
_CACHE_LIMIT = 10_000
_AVRO_PARSED = frozenset({SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF})


def schema_id(topic: TopicName) -> str:
    """The registry's name for a topic's schema: `tenant/namespace/topic` of the partitioned
    topic, so every partition (and the persistent and non-persistent topic of one name, as in
    Pulsar) shares it."""
    base = topic.partitioned_topic_name
    return f"{base.tenant}/{base.namespace}/{base.local_name}"


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    version: int
    schema: SchemaData


class SchemaRegistry:
    """The versions of every topic's schema; the only writer of `/schemas/` keys, so it
    caches what it read."""

    def __init__(self, store: MetadataStore, *, clock: Callable[[], float] = time.time,
                 max_fields: int | None = None) -> None:
        """`max_fields`: an Avro definition's fields, union branches and symbols at most
        (definitions.avro_members), None for no limit."""
        self._store = store
        self._clock = clock
        self.max_fields = max_fields
        self._cache: dict[str, list[SchemaVersion]] = {}

    # -- reads
    def history(self, sid: str) -> list[SchemaVersion]:
        """Every stored version, tombstones included, oldest first."""
        cached = self._cache.get(sid)
        if cached is None:
            prefix = f"{_PREFIX}{sid}/"
            cached = []
            for key in self._store.list(prefix):
                raw = self._store.get(key)
                if raw is not None:
                    cached.append(SchemaVersion(int(key[len(prefix):], 16), _decode(raw)))
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[sid] = cached
        return list(cached)

    def live(self, sid: str) -> list[SchemaVersion]:
        """The versions after the last tombstone: what compatibility and lookups consider."""
        versions = self.history(sid)
        for index in range(len(versions) - 1, -1, -1):
            if versions[index].schema.deleted:
                return versions[index + 1:]
        return versions

    def latest(self, sid: str) -> SchemaVersion | None:
        """The newest version, None when there is none or it is a tombstone."""
        versions = self.history(sid)
        if not versions or versions[-1].schema.deleted:
            return None
        return versions[-1]

    def get(self, sid: str, version: int | None = None) -> SchemaVersion:
        """A version (the latest when None) that has not been deleted."""
        found = self.latest(sid) if version is None else next((v for v in self.live(sid) if v.version == version), None)
        if found is None:
            what = "schema" if version is None else f"schema version {version}"
            raise SchemaNotFoundError(f"Topic {sid} has no {what}")
        return found

    def has_schema(self, sid: str) -> bool:
        return self.latest(sid) is not None

    def find_version(self, sid: str, schema: SchemaData) -> int | None:
        """The live version equal to `schema`: same type and, for Avro-based types, the same
        parsed schema (whitespace aside), else the same definition bytes."""
        return find_equal(self.live(sid), schema)

    # -- checks
    def check_compatible(self, sid: str, schema: SchemaData, strategy: CompatibilityStrategy) -> None:
        """Raise unless `schema` is well formed and would be accepted now (nothing is written)."""
        self.decide_compatible(self.live(sid), schema, strategy)

    def check_consumer(self, sid: str, schema: SchemaData, strategy: CompatibilityStrategy) -> None:
        """A consumer's schema on a topic that is in use (see `decide_consumer`)."""
        self.decide_consumer(self.live(sid), schema, strategy)

    # -- decisions: what the checks cost, on the live versions given (no store, no cache)
    def decide_compatible(self, live: list[SchemaVersion], schema: SchemaData,
                          strategy: CompatibilityStrategy) -> None:
        validate(schema, self.max_fields)
        check_against_history([v.schema for v in live], schema, _effective(strategy))

    def decide_consumer(self, live: list[SchemaVersion], schema: SchemaData, strategy: CompatibilityStrategy) -> None:
        """It must be able to read what the topic holds (BACKWARD against the latest for the
        plain strategies and FORWARD_TRANSITIVE, the strategy itself against all versions for
        the others)."""
        strategy = _effective(strategy)
        if strategy == CompatibilityStrategy.ALWAYS_COMPATIBLE:
            return
        validate(schema, self.max_fields)
        if not live:
            raise SchemaNotFoundError("The topic does not have schema to check")
        if strategy in (CompatibilityStrategy.BACKWARD, CompatibilityStrategy.FORWARD,
                        CompatibilityStrategy.FORWARD_TRANSITIVE, CompatibilityStrategy.FULL):
            strategy = CompatibilityStrategy.BACKWARD
        check_against_history([v.schema for v in live], schema, strategy)

    def decide_version(self, live: list[SchemaVersion], schema: SchemaData) -> int | None:
        """`find_version`'s answer; None also for a definition `validate` refuses (within
        `max_fields` before anything is parsed), which no version can equal."""
        try:
            validate(schema, self.max_fields)
        except InvalidSchemaError:
            return None
        return find_equal(live, schema)

    def decide(self, live: list[SchemaVersion], schema: SchemaData, strategy: CompatibilityStrategy, *,
               allow_auto_update: bool = True) -> int | None:
        """What `put_if_absent` does with `schema`: the version of an equal live one, or None
        when it is to be appended. Raises InvalidSchemaError for a malformed definition and
        IncompatibleSchemaError for a refusal."""
        validate(schema, self.max_fields)
        existing = find_equal(live, schema)
        if existing is not None:
            return existing
        if not allow_auto_update:
            raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
        check_against_history([v.schema for v in live], schema, _effective(strategy))
        return None

    # -- writes
    def put_if_absent(self, sid: str, schema: SchemaData, strategy: CompatibilityStrategy, *,
                      allow_auto_update: bool = True) -> int:
        """The version of `schema`: an existing equal one, else a new one appended once the
        strategy accepts it (see `decide`)."""
        existing = self.decide(self.live(sid), schema, strategy, allow_auto_update=allow_auto_update)
        return existing if existing is not None else self.append(sid, schema)

    def append(self, sid: str, schema: SchemaData) -> int:
        """A new version of `schema`, stamped with the time, which `decide` accepted."""
        stamped = SchemaData(schema.type, schema.data, dict(schema.properties), schema.user, self._now(), False)
        return self._append(sid, stamped)

    def delete(self, sid: str, user: str = "") -> int:
        """Append a tombstone (Pulsar's delete without `force`); its version is returned."""
        return self._append(sid, SchemaData(SchemaType.NONE, b"", {}, user, self._now(), True))

    def delete_all(self, sid: str) -> None:
        """Forget every version (a deleted topic; a forced delete)."""
        self._cache.pop(sid, None)
        self._store.delete_prefix(f"{_PREFIX}{sid}/")

    def _append(self, sid: str, schema: SchemaData) -> int:
        versions = self.history(sid)
        version = versions[-1].version + 1 if versions else 0
        self._store.put(f"{_PREFIX}{sid}/{version:016x}", _encode(schema))
        self._cache[sid] = [*versions, SchemaVersion(version, schema)]
        return version

    def _now(self) -> int:
        return int(self._clock() * 1000)


def same_version(live: list[SchemaVersion], schema: SchemaData) -> int | None:
    """The live version with the very definition of `schema` (its hash; nothing parsed)."""
    return next((v.version for v in live if v.schema.same_as(schema)), None)


def find_equal(live: list[SchemaVersion], schema: SchemaData) -> int | None:
    """The live version equal to `schema`: same type and, for Avro-based types, the same
    parsed schema (whitespace aside), else the same definition bytes."""
    wanted = _identity(schema)
    for candidate in live:
        if candidate.schema.type == schema.type and _identity(candidate.schema) == wanted:
            return candidate.version
    return None


def _effective(strategy: CompatibilityStrategy) -> CompatibilityStrategy:
    """UNDEFINED reaching the registry means nothing was set anywhere: Pulsar's default, FULL."""
    return CompatibilityStrategy.FULL if strategy == CompatibilityStrategy.UNDEFINED else strategy


def _identity(schema: SchemaData) -> object:
    if schema.type in _AVRO_PARSED:
        canonical = _avro_identity(schema.data, schema.type)
        if canonical is not None:
            return canonical
    return schema.identity


_identities: BoundedCache[str | None] = BoundedCache(PARSED_LIMIT, PARSED_BYTES)


def _avro_identity(data: bytes, kind: SchemaType) -> str | None:
    """An Avro-based definition as one string, the same whatever its whitespace or key order
    (what comparing the parsed schemas compares), computed once per definition: a producer's
    schema is compared with every live version."""
    return _identities.get((data, kind), len(data), lambda: _canonical(data, kind))


def _canonical(data: bytes, kind: SchemaType) -> str | None:
    try:
        return json.dumps(parse_avro(data, kind).to_json(), sort_keys=True)
    except InvalidSchemaError:
        return None


def _encode(schema: SchemaData) -> bytes:
    return json.dumps({
        "type": schema.type.name,
        "data": base64.b64encode(schema.data).decode("ascii"),
        "properties": dict(schema.properties),
        "user": schema.user,
        "timestamp": schema.timestamp,
        "deleted": schema.deleted,
    }, sort_keys=True).encode()


def _decode(raw: bytes) -> SchemaData:
    record = json.loads(raw)
    return SchemaData(SchemaType[record["type"]], base64.b64decode(record["data"]), record["properties"],
                      record["user"], record["timestamp"], record["deleted"])
