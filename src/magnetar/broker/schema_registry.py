"""The broker's schema registry service (Pulsar's SchemaRegistryService as topics use it):
registration of producers' and consumers' schemas under the topic's policies, lookups for
GET_SCHEMA, and forgetting a deleted topic's schema.

The policies, each resolved topic > namespace > broker default:
- `schemaCompatibilityStrategy` (namespace field `schema_compatibility_strategy`; UNDEFINED
  means not set; an old namespace's `schema_auto_update_compatibility_strategy` is honoured
  when no strategy is set; broker default FULL);
- `isAllowAutoUpdateSchema` (namespace field `is_allow_auto_update_schema`, broker key
  `isAllowAutoUpdateSchemaEnabled`): may a new schema be added at all;
- `schemaValidationEnforced` (`schema_validation_enforced`, broker key
  `isSchemaValidationEnforced`): may a producer without a schema use a topic that has one.

Every refusal reaches the client as IncompatibleSchema (18), as in Pulsar.

What costs in proportion to a definition's size (parsing it, comparing it with the live
versions: up to a second for a record of `schemaMaxFields` fields) never runs on the event
loop. A registration or check that needs it raises SchemaCheckPending: the work runs on one
worker thread, and its outcome is kept under the topic's live versions, the schema and the
policies it was decided on, so the command that met it, handled again once it is done, finds
it at once (as does every other producer of the same schema meanwhile). A definition equal
byte for byte to a live version, the common case of a producer reconnecting, needs none of it.
The thread holds the interpreter lock while it works, but hands it to the loop every few
milliseconds (the interpreter's switch interval).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.policies.topic_policies import Policy
from magnetar.schemas import (
    CompatibilityStrategy,
    InvalidSchemaError,
    SchemaData,
    SchemaError,
    SchemaNotFoundError,
    SchemaRegistry,
    SchemaType,
    SchemaVersion,
    schema_id,
    version_bytes,
    version_from_bytes,
)
from magnetar.schemas.registry import same_version
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.storage import MetadataStore
    from magnetar.wire.topic_name import TopicName

SCHEMA_COMPATIBILITY = Policy(
    "schemaCompatibilityStrategy", "schema_compatibility_strategy", "schemaCompatibilityStrategy")
SCHEMA_AUTO_UPDATE = Policy("isAllowAutoUpdateSchema", "is_allow_auto_update_schema", "isAllowAutoUpdateSchemaEnabled")
SCHEMA_VALIDATION_ENFORCED = Policy(
    "schemaValidationEnforced", "schema_validation_enforced", "isSchemaValidationEnforced")
SCHEMA_STRATEGIES = tuple(strategy.value for strategy in CompatibilityStrategy)
"""Pulsar's SchemaCompatibilityStrategy names, as policies take them."""
_LEGACY_AUTO_UPDATE = Policy("schemaAutoUpdateCompatibilityStrategy", "schema_auto_update_compatibility_strategy",
                            "schemaCompatibilityStrategy")
"""What namespaces set before `schema_compatibility_strategy` existed (Backward, Full, ...)."""
_UNSET = (None, CompatibilityStrategy.UNDEFINED.value)
MAX_OUTCOMES = 1024
"""Outcomes of checks kept (each a key of a few hashes and the live version numbers)."""
T = TypeVar("T")


class SchemaCheckPending(Exception):
    """The schema's check runs off the event loop: ask again once `done` completes."""

    def __init__(self, done: asyncio.Future[object]) -> None:
        super().__init__("a schema check is in progress")
        self.done = done


class _Checks:
    """Schema checks on one worker thread (started with the first), each outcome kept by
    what it was decided on."""

    def __init__(self) -> None:
        self._worker: ThreadPoolExecutor | None = None
        self._outcomes: OrderedDict[Hashable, tuple[bool, object]] = OrderedDict()
        self._running: dict[Hashable, asyncio.Future[tuple[bool, object]]] = {}

    def outcome(self, key: Hashable, work: Callable[[], T]) -> T:
        """What `work` returned (or raised) for `key`; SchemaCheckPending while it runs."""
        found = self._outcomes.get(key)
        if found is not None:
            self._outcomes.move_to_end(key)
            returned, value = found
            if returned:
                return value  # type: ignore[return-value]
            # without the traceback of the last raise, which each raise would add to
            raise value.with_traceback(None)  # type: ignore[attr-defined]
        running = self._running.get(key)
        if running is None:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="magnetar-schema-check")
            running = asyncio.get_running_loop().run_in_executor(self._worker, _attempt, work)
            self._running[key] = running
            running.add_done_callback(lambda done: self._settle(key, done))
        raise SchemaCheckPending(running)  # type: ignore[arg-type]

    def _settle(self, key: Hashable, done: asyncio.Future[tuple[bool, object]]) -> None:
        self._running.pop(key, None)
        if not done.cancelled():
            self._outcomes[key] = done.result()
            if len(self._outcomes) > MAX_OUTCOMES:
                self._outcomes.popitem(last=False)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)


def _attempt(work: Callable[[], object]) -> tuple[bool, object]:
    """(True, what `work` returned) or (False, what it raised), without the frames it held nor
    the exceptions it was raised during: a kept outcome must not keep parsed schemas alive."""
    try:
        return True, work()
    except Exception as exc:  # raised again to whoever asks for the outcome
        exc.__context__ = exc.__cause__ = None
        return False, exc.with_traceback(None)


async def settled(attempt: Callable[[], T]) -> T:
    """`attempt()`, called again after each check it waited for (the admin API's way)."""
    while True:
        try:
            return attempt()
        except SchemaCheckPending as pending:
            await asyncio.shield(pending.done)  # a cancelled request leaves the check to the others


class SchemaRegistryService:
    def __init__(self, store: MetadataStore, policies: TopicPolicies, config: ServiceConfiguration) -> None:
        self.registry = SchemaRegistry(store, max_fields=config.schemaMaxFields)
        self._policies = policies
        self._config = config
        self._checks = _Checks()

    def close(self) -> None:
        self._checks.close()

    # -- policies
    def strategy(self, topic: TopicName) -> CompatibilityStrategy:
        """The topic's strategy, else its namespace's, else the broker's (UNDEFINED = unset)."""
        namespace = topic.namespace_name
        value = self._policies.topic_value(topic, SCHEMA_COMPATIBILITY)
        if value in _UNSET:
            value = self._policies.existing_namespace_value(namespace, SCHEMA_COMPATIBILITY)
        if value in _UNSET:
            legacy = self._policies.existing_namespace_value(namespace, _LEGACY_AUTO_UPDATE)
            if legacy is not None:
                return CompatibilityStrategy.from_auto_update(legacy)
            value = self._config.schemaCompatibilityStrategy
        strategy = CompatibilityStrategy.parse(value)
        return CompatibilityStrategy.FULL if strategy == CompatibilityStrategy.UNDEFINED else strategy

    def allow_auto_update(self, topic: TopicName) -> bool:
        return bool(self._policies.effective(topic, SCHEMA_AUTO_UPDATE))

    def validation_enforced(self, topic: TopicName) -> bool:
        return bool(self._policies.effective(topic, SCHEMA_VALIDATION_ENFORCED))

    # -- registration
    def add_schema(self, topic: TopicName, schema: SchemaData | None) -> bytes:
        """A producer's schema (Pulsar's tryAddSchema): its version, registered if new and
        allowed; without one, empty, unless the topic has a schema and enforces it."""
        sid = schema_id(topic)
        if schema is None:
            if self.registry.has_schema(sid) and self.validation_enforced(topic):  # the cached check first
                raise _incompatible("Producers cannot connect or send message without a schema to topics with a "
                                    "schema if SchemaValidationEnforced is enabled")
            return b""
        try:
            version = self.version_of(topic, schema)
        except SchemaError as exc:
            raise _incompatible(str(exc)) from None
        return version_bytes(version)

    def version_of(self, topic: TopicName, schema: SchemaData, *, uploaded: bool = False) -> int:
        """`schema`'s version, registered if new and allowed; SchemaError when refused. An
        admin's upload is not held to isAllowAutoUpdateSchema (as in Pulsar)."""
        sid = schema_id(topic)
        live = self.registry.live(sid)
        found = same_version(live, schema)
        if found is not None:
            return found
        strategy, allow = self.strategy(topic), uploaded or self.allow_auto_update(topic)
        found = self._checks.outcome(_key("register", sid, live, schema, strategy, allow),
                                     lambda: self.registry.decide(live, schema, strategy, allow_auto_update=allow))
        return found if found is not None else self.registry.append(sid, schema)

    def add_schema_if_idle_or_check(self, topic: TopicName, schema: SchemaData | None, *, idle: bool) -> None:
        """A consumer's schema: registered when the topic is idle and has none (no producers,
        no consumers, nothing stored), else it must read what the topic holds."""
        if schema is None or schema.type == SchemaType.AUTO_CONSUME:
            return
        sid = schema_id(topic)
        if idle and not self.registry.has_schema(sid):
            self.add_schema(topic, schema)
            return
        strategy, live = self.strategy(topic), self.registry.live(sid)
        try:
            self._checks.outcome(_key("consume", sid, live, schema, strategy),
                                 lambda: self.registry.decide_consumer(live, schema, strategy))
        except SchemaNotFoundError:
            raise _incompatible("Failed to add schema to an active topic with empty(BYTES) schema: new schema type "
                                f"{schema.type.name}") from None
        except SchemaError as exc:
            raise _incompatible(str(exc)) from None

    def check_compatible(self, topic: TopicName, schema: SchemaData) -> None:
        """Raise SchemaError unless `schema` would be registered now (the admin API's check)."""
        sid, strategy = schema_id(topic), self.strategy(topic)
        live = self.registry.live(sid)
        self._checks.outcome(_key("compatible", sid, live, schema, strategy),
                             lambda: self.registry.decide_compatible(live, schema, strategy))

    def find_version(self, topic: TopicName, schema: SchemaData) -> int | None:
        """The live version equal to `schema` (parsed, so whitespace aside), if any."""
        sid = schema_id(topic)
        live = self.registry.live(sid)
        return self._checks.outcome(_key("find", sid, live, schema), lambda: self.registry.decide_version(live, schema))

    # -- lookups
    def get(self, topic: TopicName, version: bytes | None) -> SchemaVersion:
        """The schema at `version` (8 bytes; the latest when None), for GET_SCHEMA."""
        sid = schema_id(topic)
        try:
            number = None if version is None else version_from_bytes(version)
            return self.registry.get(sid, number)
        except (SchemaNotFoundError, InvalidSchemaError) as exc:
            raise BrokerServiceError(pb.TopicNotFound, f"Topic not found or no-schema {topic}: {exc}") from None

    def delete_topic(self, topic: TopicName) -> None:
        """A deleted non-partitioned or whole partitioned topic's schema goes with it; one
        partition's deletion leaves the schema its siblings share (as Pulsar)."""
        if topic.partition_index < 0:
            self.registry.delete_all(schema_id(topic))


def _key(*parts: object) -> tuple[object, ...]:
    """What a check's outcome depends on: the live versions as their numbers (never reused),
    a schema as its type and identity, the rest as given."""
    return tuple(tuple(v.version for v in part) if isinstance(part, list) else
                 (part.type, part.identity) if isinstance(part, SchemaData) else part for part in parts)


def _incompatible(message: str) -> BrokerServiceError:
    return BrokerServiceError(pb.IncompatibleSchema, message)
