"""The functions worker on demand, as the standalone runs it.

`/admin/v3/functions` is served from the start, but the worker's code (its REST handlers,
the supervisor, stats) loads and the worker starts with the first request there, or at
start when the store holds functions to bring back: a broker nobody deploys a function
to does not pay for them (tests/broker/test_startup_imports.py keeps it so).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar import web
from magnetar.functions.routes import MAX_CODE_BYTES, ROUTES
from magnetar.functions.store import FunctionStore

if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService
    from magnetar.functions.api import FunctionsApi
    from magnetar.functions.supervisor import Endpoints
    from magnetar.functions.worker import FunctionsWorker

log = logging.getLogger("magnetar.functions")


class FunctionsOnDemand:
    def __init__(self, service: BrokerService, data_dir: Path, endpoints: Callable[[], Endpoints]) -> None:
        self.service = service
        self.data_dir = data_dir
        self._endpoints = endpoints
        self.worker: FunctionsWorker | None = None
        self._api: asyncio.Future[FunctionsApi] | None = None

    def routes(self) -> list[web.RouteDef]:
        return [web.route(method, path, self._handler(name), max_body=MAX_CODE_BYTES) for method, path, name in ROUTES]

    async def start(self) -> None:
        """Bring back what the store holds (a restart); nothing to load otherwise. A worker
        that cannot start (functionInstanceIsolation=bubblewrap on a machine without it) is
        reported, and the broker runs on without it: the next functions request tries again."""
        if FunctionStore(self.service.metadata).fqfns():
            try:
                await self.api()
            except Exception:
                log.exception("functions worker not started: the stored functions do not run")

    async def stop(self) -> None:
        if self.worker is not None:
            await self.worker.stop()

    def metrics(self) -> str:
        return self.worker.metrics() if self.worker is not None else ""

    def api(self) -> asyncio.Future[FunctionsApi]:
        """The REST handlers over a started worker; requests that come while it starts wait
        for the same one."""
        if self._api is None:
            self._api = asyncio.ensure_future(self._load())
        return self._api

    async def _load(self) -> FunctionsApi:
        """A failure reaches the requests waiting (500), and the next one tries again."""
        from magnetar.functions.api import FunctionsApi  # noqa: PLC0415  (on demand: see the module's docstring)
        from magnetar.functions.worker import FunctionsWorker  # noqa: PLC0415

        try:
            worker = FunctionsWorker(self.service, self.data_dir)
            await worker.start(self._endpoints())
        except BaseException:
            self._api = None
            raise
        self.worker = worker
        return FunctionsApi(worker)

    def _handler(self, name: str) -> web.Handler:
        async def handle(request: web.Request) -> web.Response:
            handler: web.Handler = getattr(await self.api(), name)
            return await handler(request)

        handle.__name__ = name
        return handle
