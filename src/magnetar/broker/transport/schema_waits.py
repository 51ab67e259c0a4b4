"""Commands of one connection waiting for a schema check that runs off the event loop
(broker.schema_registry's SchemaCheckPending): PRODUCER, SUBSCRIBE and GET_OR_CREATE_SCHEMA
are handled again once it is done, when the check's outcome is kept and quick to find. A
PRODUCER or SUBSCRIBE whose topic's managed ledger opens off the loop (TopicLoading) waits
here the same way.

A connection waits for a few checks at once (of different schemas; the producers of a
partitioned topic share one): past that, the command is refused with ServiceNotReady, which
clients retry, so a client cannot queue the worker thread without bound. A producer or
consumer the client closed while its check ran is not created afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
MAX_SCHEMA_CHECKS = 4
Refuse = Callable[[pb.BaseCommand, int, str], None]


class SchemaWaits:
    def __init__(self, is_open: Callable[[], bool], refuse: Refuse) -> None:
        """`refuse` answers a command with an error in the response type its client awaits."""
        self._is_open, self._refuse = is_open, refuse
        self._checks: dict[asyncio.Future[object], int] = {}
        """The checks commands wait for, and how many wait for each."""
        self._awaiting: dict[tuple[str, int], int] = {}
        """Producers and consumers to create once their check is done, by (kind, id)."""

    def wait(self, done: asyncio.Future[object], again: Callable[[], None], cmd: pb.BaseCommand, *,
             bounded: bool = True) -> None:
        """Calls `again` (which handles `cmd` anew) once `done` completes; a `bounded` wait (a
        schema check) counts against MAX_SCHEMA_CHECKS, a topic's loading does not."""
        checks = self._checks
        if bounded:
            if done not in checks and len(checks) >= MAX_SCHEMA_CHECKS:
                self._refuse(cmd, pb.ServiceNotReady,
                             f"more than {MAX_SCHEMA_CHECKS} schema checks are in progress on this connection")
                return
            checks[done] = checks.get(done, 0) + 1
        awaited = _awaited(cmd)
        if awaited is not None:
            self._awaiting[awaited] = self._awaiting.get(awaited, 0) + 1
        done.add_done_callback(lambda _: self._done(done if bounded else None, awaited, again))

    def withdraw(self, kind: str, ident: int) -> None:
        self._awaiting.pop((kind, ident), None)

    def _done(self, done: asyncio.Future[object] | None, awaited: tuple[str, int] | None,
              again: Callable[[], None]) -> None:
        if done is not None:
            self._checks[done] -= 1
            if not self._checks[done]:
                del self._checks[done]
        if not self._is_open():
            return
        if awaited is not None:
            left = self._awaiting.get(awaited)
            if left is None:
                return  # closed meanwhile
            if left == 1:
                del self._awaiting[awaited]
            else:
                self._awaiting[awaited] = left - 1
        again()


def _awaited(cmd: pb.BaseCommand) -> tuple[str, int] | None:
    """The producer or consumer a command creates, if it is one."""
    if cmd.type == T.PRODUCER:
        return "producer", cmd.producer.producer_id
    if cmd.type == T.SUBSCRIBE:
        return "consumer", cmd.subscribe.consumer_id
    return None
