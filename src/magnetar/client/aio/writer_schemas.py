"""The schema versions messages were written with, as a consumer needs them to decode.

A message carries only its writer's version number; `GET_SCHEMA` on the topic's broker
turns it into the definition. Each (topic, version) is fetched once per client (versions
never change; all partitions share them) and concurrent askers share the one request.
The blocking facade decodes on the application's thread, so `get` waits for a fetch the
event loop runs; asyncio consumers `await fetch` before they hand a message over.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from magnetar.client import errors
from magnetar.client.aio.lookup import LookupService
from magnetar.client.aio.pool import ConnectionPool
from magnetar.client.topic_name import base_topic_name
from magnetar.wire import client_commands as cc

if TYPE_CHECKING:
    from magnetar.schemas.model import SchemaData

_Key = tuple[str, bytes]


class WriterSchemas:
    def __init__(self, pool: ConnectionPool, lookup: LookupService, timeout: float) -> None:
        self._pool = pool
        self._lookup = lookup
        self._timeout = timeout
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._known: dict[_Key, SchemaData] = {}
        self._fetching: dict[_Key, asyncio.Task[SchemaData]] = {}

    def cached(self, topic: str, version: bytes) -> SchemaData | None:
        return self._known.get((base_topic_name(topic), version))

    def get(self, topic: str, version: bytes) -> SchemaData:
        """The definition, fetched if needed; from any thread but the event loop's."""
        known = self.cached(topic, version)
        if known is not None:
            return known
        if threading.get_ident() == self._loop_thread:
            raise errors.OperationNotSupported(
                f"schema version {int.from_bytes(version, 'big')} of {topic} is not fetched yet: "
                "asyncio consumers decode messages their receive() returned")
        future = asyncio.run_coroutine_threadsafe(self.fetch(topic, version), self._loop)
        return future.result()

    async def fetch(self, topic: str, version: bytes) -> SchemaData:
        key = (base_topic_name(topic), version)
        known = self._known.get(key)
        if known is not None:
            return known
        task = self._fetching.get(key)
        if task is None:
            task = self._fetching[key] = self._loop.create_task(self._get(topic, key))
            task.add_done_callback(lambda _: self._fetching.pop(key, None))
        return await asyncio.shield(task)

    async def _get(self, topic: str, key: _Key) -> SchemaData:
        """GET_SCHEMA on the broker of `topic` (a partition's name is what the lookup knows)."""
        try:
            async with asyncio.timeout(self._timeout):
                logical, physical = await self._lookup.broker_for(topic)
                conn = await self._pool.get(logical, physical)
                answer = await conn.request(lambda rid: cc.get_schema(rid, topic, key[1]))
        except TimeoutError:
            raise errors.Timeout(f"GET_SCHEMA of {topic} timed out") from None
        from magnetar.schemas.protocol import from_wire  # noqa: PLC0415 (loaded when schemas are used)

        schema = from_wire(answer.getSchemaResponse.schema)
        if schema is None:
            raise errors.UnknownError(
                f"{topic} answered GET_SCHEMA version {int.from_bytes(key[1], 'big')} without a schema")
        self._known[key] = schema
        return schema
