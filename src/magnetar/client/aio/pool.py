"""Connections pooled per broker: one per (logical URL, physical URL), as the C++ client keys them.

Producers and consumers on the same broker share a connection. Two tasks asking for a
connection that is being opened wait for the same attempt instead of opening two.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from magnetar.client.aio.connection import Connection
from magnetar.client.url import parse_service_url
from magnetar.credentials.security import ClientSecurity


@dataclass(slots=True)
class PoolConfig:
    operation_timeout: float = 30.0
    connection_timeout: float = 10.0
    keepalive_interval: float = 30.0
    security: ClientSecurity = field(default_factory=ClientSecurity)


class ConnectionPool:
    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self._connections: dict[tuple[str, str], Connection] = {}
        self._opening: dict[tuple[str, str], asyncio.Task[Connection]] = {}
        self.closed = False

    async def get(self, logical_url: str, physical_url: str | None = None) -> Connection:
        """A live connection to `physical_url` (default: the logical one) for `logical_url`."""
        key = (logical_url, physical_url or logical_url)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        task = self._opening.get(key)
        if task is None:
            task = asyncio.ensure_future(self._open(key))
            self._opening[key] = task
            task.add_done_callback(lambda _t: self._opening.pop(key, None))
        return await asyncio.shield(task)

    async def _open(self, key: tuple[str, str]) -> Connection:
        logical, physical = key
        url = parse_service_url(physical)
        host, port = url.first
        conn = await Connection.open(
            logical, physical, host, port,
            operation_timeout=self.config.operation_timeout,
            connection_timeout=self.config.connection_timeout,
            keepalive_interval=self.config.keepalive_interval,
            on_closed=self._forget,
            tls=url.tls,
            security=self.config.security,
        )
        if self.closed:
            conn.close()
        else:
            self._connections[key] = conn
        return conn

    def _forget(self, conn: Connection) -> None:
        key = (conn.logical_url, conn.physical_url)
        if self._connections.get(key) is conn:
            del self._connections[key]

    def close(self) -> None:
        self.closed = True
        for task in self._opening.values():
            task.cancel()
        for conn in list(self._connections.values()):
            conn.close()
        self._connections.clear()
