"""The admin HTTP API: Pulsar's REST paths under /admin/v2, laid out by resource as
Pulsar's v2 API is (tenants and clusters, namespaces, topics, brokers and lookup),
plus /metrics.

Paths, query parameters, bodies and status codes follow Pulsar's, so a Pulsar user's
scripts (and `curl` habits) carry over.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Iterable, Iterator

from magnetar import web
from magnetar.admin import metrics
from magnetar.admin.brokers import BrokersApi
from magnetar.admin.loop_slices import LoopSlices
from magnetar.admin.namespaces import NamespacesApi
from magnetar.admin.operations import ROUTES, Route
from magnetar.admin.permissions import PermissionsApi
from magnetar.admin.produce import RestProducerApi
from magnetar.admin.responses import errors_as_json, request_log
from magnetar.admin.schemas import SchemasApi
from magnetar.admin.security import security_middleware
from magnetar.admin.subscriptions import SubscriptionsApi
from magnetar.admin.tenants import TenantsApi
from magnetar.admin.topics import TopicsApi
from magnetar.admin.transactions import TransactionsApi
from magnetar.broker.auth.operations import Operation
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.transport.advertised_listeners import default_advertised_address

METRICS_PART_LINES = 4096
"""Lines of /metrics in one part of the response at most (one send, one copy)."""


class AdminServer:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.rules: dict[Route, Operation] = dict(ROUTES)
        """What each route does, for the security middleware: admin.operations' table, and the
        operation of each route added with `add_routes`."""
        self.router = web.Router()
        budget = service.config.webServiceRequestTimeoutSeconds
        self.server = web.WebServer(self.router, [request_log, errors_as_json(budget),
                                                  security_middleware(service, self.rules)], budget,
                                    service.config.maxHttpServerConnections)
        topics = TopicsApi(service)
        for api in (TenantsApi(service, self.http_url), NamespacesApi(service), topics, SubscriptionsApi(topics),
                    BrokersApi(service, self.http_url, self.https_url, self.bound_ports),
                    PermissionsApi(service, topics.topic_name),
                    SchemasApi(service), TransactionsApi(service), RestProducerApi(service)):
            self.router.add_routes(api.routes())
        self.router.add_routes([web.get("/metrics", self.metrics)])
        if service.config.webConsoleEnabled:
            self.router.add_routes([web.get("/", _console_file), web.get("/console/{file}", _console_file)])
        self.metrics_sources: list[Callable[[], str]] = []
        """More of /metrics from above the admin API (the functions worker's)."""
        self.port: int | None = None
        self.tls_port: int | None = None

    def add_routes(self, routes: Iterable[web.RouteDef], operation: Operation) -> None:
        """Routes from above the admin API (the functions worker's), all performing `operation`."""
        for route in self.router.add_routes(routes):
            self.rules[(route.method, route.canonical)] = operation

    def http_url(self) -> str:
        """The admin URL clients are told, on the advertised address (never a wildcard):
        http:// when that port is on, else https://."""
        return self._advertised("http", self.port) or self._advertised("https", self.tls_port)

    def https_url(self) -> str:
        return self._advertised("https", self.tls_port)

    def _advertised(self, scheme: str, port: int | None) -> str:
        if port is None:
            return ""
        config = self.service.config
        address = default_advertised_address(config.advertisedAddress, config.bindAddress)
        host = f"[{address}]" if ":" in address else address
        return f"{scheme}://{host}:{port}"

    def bound_ports(self) -> dict[str, int | None]:
        """The admin API's ports under their configuration keys (None: not listened on)."""
        return {"webServicePort": self.port, "webServicePortTls": self.tls_port}

    def console_urls(self) -> list[str]:
        """Where the web console is, when it is on."""
        return [f"{url}/" for url in self.bound_urls()] if self.service.config.webConsoleEnabled else []

    def bound_urls(self) -> list[str]:
        """Where the admin API listens (which may be a wildcard address)."""
        host = self.service.config.bindAddress
        return [f"{scheme}://{host}:{port}" for scheme, port in (("http", self.port), ("https", self.tls_port))
                if port is not None]

    async def start(self, host: str, port: int | None, tls_port: int | None = None) -> None:
        if port is not None:
            self.port = await self.server.listen(host, port, None)
        if tls_port is not None:
            self.tls_port = await self.server.listen(host, tls_port, self.service.ssl_context)

    async def stop(self) -> None:
        await self.server.close()

    async def metrics(self, _request: web.Request) -> web.Response:
        """The page is made a slice at a time (loop_slices: 2 ms of work, then the loop's other
        clients have a turn) and sent in those slices: at 10,000 topics it is tens of
        megabytes, whose making and copying in one go held every producer's receipt for a
        third of a second."""
        service = self.service
        topics = [*service.topics.values(), *service.non_persistent_topics.values()]
        disk = shutil.disk_usage(service.factory.data_dir)  # one statvfs call
        lines = metrics.lines(topics, service.factory.entry_cache, service.context.publish_latency, service.loop_lag,
                              writable=not service.full_disk.full, cluster=service.config.clusterName,
                              disk=(disk.total, disk.free))
        if service.transactions is not None or any(getattr(t, "transaction_buffer", None) for t in topics):
            from magnetar.admin import transaction_metrics  # noqa: PLC0415 (only where transactions are)

            lines = itertools.chain(lines, transaction_metrics.lines(service.transactions, topics,
                                                                     service.config.clusterName))
        parts = await _in_slices(lines)
        parts += [source().encode() for source in self.metrics_sources]
        return web.Response(body=parts, content_type="text/plain; charset=utf-8")


async def _in_slices(lines: Iterator[str]) -> list[bytes]:
    """`lines` as text in parts of at most METRICS_PART_LINES, the loop handed back after
    each slice of making them (loop_slices)."""
    slices = LoopSlices()
    parts: list[bytes] = []
    part: list[str] = []
    for n, line in enumerate(lines, 1):
        part.append(line)
        if n % 128 == 0 and (slices.spent() or len(part) >= METRICS_PART_LINES):
            parts.append(("\n".join(part) + "\n").encode())
            part = []
            await slices.next()
    parts.append(("\n".join(part) + "\n").encode())
    return parts


async def _console_file(request: web.Request) -> web.Response:
    """The web console's files: its code loads with the first request for one, so a broker
    nobody opens a browser on never imports it (tests/broker/test_startup_imports.py)."""
    from magnetar.console.files import serve  # noqa: PLC0415  (on demand: see the docstring)

    return serve(request)
