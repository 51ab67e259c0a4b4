"""`/admin/v2/brokers/...` and `/lookup/v2/topic/...`: broker information, and the HTTP
lookup that lets a client start from `http://host:8080`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from magnetar import __version__, web
from magnetar.admin.responses import bool_param, fail
from magnetar.broker.config.secrets import masked
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.transport.advertised_listeners import ListenerNotFoundError
from magnetar.wire.proto import pulsar_api_pb2 as pb

LOOKUP = "/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}"


class BrokersApi:
    def __init__(self, service: BrokerService, http_url: Callable[[], str],
                 https_url: Callable[[], str] = lambda: "",
                 web_ports: Callable[[], dict[str, int | None]] = dict) -> None:
        self.service = service
        self._http_url = http_url
        self._https_url = https_url
        self._web_ports = web_ports

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/admin/v2/brokers/health", self.health),
            web.get("/admin/v2/brokers/ready", self.ok),
            web.get("/admin/v2/brokers/version", self.version),
            web.get("/admin/v2/brokers/configuration/runtime", self.runtime_configuration),
            web.get("/admin/v2/brokers/{cluster}", self.list_brokers),
            web.get(LOOKUP, self.lookup),
        ]

    async def ok(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def health(self, _request: web.Request) -> web.Response:
        """Pulsar's check writes a message and reads it back, and answers 500 with the reason
        when it cannot; the write is what can fail here, so the check asks storage whether
        a write fits (broker.topics.full_disk). Readiness (`/ready`) is not affected: a
        broker with a full disk still serves reads."""
        reason = await self.service.full_disk.check()
        if reason is not None:
            raise fail(500, f"the broker cannot store messages: its disk is full ({reason})")
        return web.Response(text="ok")

    async def version(self, _request: web.Request) -> web.Response:
        return web.Response(text=f"magnetar-{__version__}")

    async def runtime_configuration(self, _request: web.Request) -> web.Response:
        """The configuration in effect, every value as a string, as Pulsar answers it.

        Secrets are masked (broker.config.secrets): an admin role reading the configuration
        must not learn the token signing key or the broker's own credentials. A port asked as
        0 (any free one) is shown as the one bound, the port clients reach, the Kafka listeners'
        too."""
        values = asdict(self.service.config) | self._bound_ports() | self.service.bound_settings
        return web.json_response({key: _as_text(value) for key, value in sorted(masked(values).items())})

    def _bound_ports(self) -> dict[str, int | None]:
        bound = {"brokerServicePort": self.service.port, "brokerServicePortTls": self.service.tls_port,
                 **self._web_ports()}
        return {key: port for key, port in bound.items() if port is not None}

    async def list_brokers(self, request: web.Request) -> web.Response:
        if request.match_info["cluster"] != self.service.config.clusterName:
            raise fail(404, "Cluster does not exist")
        return web.json_response([self._http_url().removeprefix("http://")])

    async def lookup(self, request: web.Request) -> web.Response:
        """Pulsar's TopicLookup: where to connect, for clients given an http:// service URL."""
        info = request.match_info
        name = self.service.parse_topic(f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}")
        if not self.service.topic_exists(name):
            self.service.check_namespace(name)
            if not self.service.config.allowAutoTopicCreation and not bool_param(request, "authoritative"):
                raise BrokerServiceError(pb.TopicNotFound, f"Topic {name} does not exist")
        try:
            listener = self.service.listeners.resolve(request.query.get("listenerName")
                                                      or request.headers.get("X-Pulsar-ListenerName"))
        except ListenerNotFoundError as exc:
            raise fail(503, str(exc)) from exc
        # Every field always present: the C++ client dereferences a null result when
        # brokerUrlTls is missing (a segfault in pulsar-client 3.13), even without TLS.
        return web.json_response({
            "brokerUrl": listener.broker_service_url or "",
            "brokerUrlTls": listener.broker_service_url_tls or "",
            "httpUrl": self._http_url(),
            "httpUrlTls": self._https_url(),
        })


def _as_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)
