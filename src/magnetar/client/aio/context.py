"""What producers, consumers and readers need of their client, and nothing more.

A handler finds its broker through the lookup service and the connection pool, numbers
itself from the client's counters and bounds its waits by the operation timeout. `Client`
builds one `ClientContext` and hands it to every handler it creates, so the handlers sit
below `aio.client` in the import graph: the client creates handlers, a handler never
reaches back for the client (a dead-letter producer, the one handler a consumer needs
created, comes from a factory the client gives `Letters`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from magnetar.client.aio.lookup import LookupService
from magnetar.client.aio.pool import ConnectionPool
from magnetar.client.aio.writer_schemas import WriterSchemas


@dataclass(slots=True)
class ClientContext:
    pool: ConnectionPool
    lookup: LookupService
    operation_timeout: float
    max_message_size: int
    """Entries larger than this are refused before a connection told the broker's limit."""
    writer_schemas: WriterSchemas
    """The schema versions messages were written with, fetched once per client."""
    _producer_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _consumer_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    def new_consumer_id(self) -> int:
        return next(self._consumer_ids)
