"""The `kafka` protocol handler: Kafka listeners (KoP's kafkaListeners) onto the broker's topics.

Listeners are KoP's: PLAINTEXT, SSL (the broker's tls* keys), and SASL_PLAINTEXT and
SASL_SSL, where clients authenticate with SASL/PLAIN against the broker's authentication
providers (see sasl) and every request is authorized as their role (see access). With
authentication on, only SASL listeners are allowed: a PLAINTEXT or SSL one would let
Kafka clients past it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from urllib.parse import urlsplit

from magnetar.broker.config import ConfigError, ServiceConfiguration
from magnetar.broker.service.protocol_handlers import HandlerBroker
from magnetar.kafka.apis import KafkaApis
from magnetar.kafka.connection import Admission, KafkaConnection
from magnetar.kafka.topics import KafkaTopics

log = logging.getLogger(__name__)
#: Room beside maxMessageSize for the request's own fields (as Pulsar pads a frame's limit).
FRAME_PADDING = 64 * 1024
SCHEMES = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def parse_listeners(value: str, key: str) -> list[tuple[str, str, int]]:
    """`PLAINTEXT://host:port,SASL_SSL://host:port,...` as (scheme, host, port); a ConfigError names the key."""
    listeners = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        scheme, _, address = item.partition("://")  # urlsplit takes no '_' in a scheme
        parts = urlsplit(f"//{address}")
        try:
            port = parts.port
        except ValueError:
            port = None
        scheme = scheme.upper()
        if scheme not in SCHEMES or port is None:
            raise ConfigError(f"{key}: {item!r} is not <protocol>://host:port with a protocol of "
                              f"{', '.join(SCHEMES)}")
        listeners.append((scheme, parts.hostname or "0.0.0.0", port))
    if not listeners:
        raise ConfigError(f"{key} is empty: the kafka protocol handler needs PLAINTEXT://host:port")
    return listeners


def check_security(config: ServiceConfiguration, schemes: set[str]) -> None:
    """SASL listeners need the broker's authentication; with it on, listeners without SASL are refused."""
    sasl = {scheme for scheme in schemes if scheme.startswith("SASL_")}
    if sasl and not config.authenticationEnabled:
        raise ConfigError(f"kafkaListeners: {', '.join(sorted(sasl))} checks passwords with the broker's "
                          "authentication providers: set authenticationEnabled=true and authenticationProviders "
                          "(token)")
    if config.authenticationEnabled and schemes - sasl:
        raise ConfigError(f"kafkaListeners: a {', '.join(sorted(schemes - sasl))} listener would let Kafka clients "
                          "past authenticationEnabled/authorizationEnabled: use SASL_PLAINTEXT or SASL_SSL")


class KafkaProtocolHandler:
    """Built by the broker with its HandlerBroker when `messagingProtocols` names `kafka`."""

    def __init__(self, broker: HandlerBroker) -> None:
        config = broker.config
        self._broker = broker
        self._listeners = parse_listeners(config.kafkaListeners, "kafkaListeners")
        check_security(config, {scheme for scheme, _, _ in self._listeners})
        self._ssl = broker.ssl_context() if any(s.endswith("SSL") for s, _, _ in self._listeners) else None
        self._advertised = (parse_listeners(config.kafkaAdvertisedListeners, "kafkaAdvertisedListeners")
                            if config.kafkaAdvertisedListeners else None)
        self._max_frame = config.maxMessageSize + FRAME_PADDING
        self._admission = Admission(broker.admit_connection, broker.release_connection,
                                    config.connectionMaxIdleMs / 1000)
        self.apis = KafkaApis(KafkaTopics(broker), config)
        self._servers: list[asyncio.Server] = []
        self._recovery: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        bound_listeners = []
        for index, (scheme, host, port) in enumerate(self._listeners):
            sasl = scheme.startswith("SASL_")
            tls: dict[str, ssl.SSLContext | float] = {} if not scheme.endswith("SSL") else {
                "ssl": self._ssl, "ssl_handshake_timeout": self.apis.config.tlsHandshakeTimeoutSeconds}
            advertised: list[tuple[str, int]] = []  # known once bound, before the first connection is accepted
            server = await loop.create_server(
                lambda sasl=sasl, advertised=advertised: KafkaConnection(self.apis, self._max_frame, sasl=sasl,
                                                                         address=advertised[0],
                                                                         admission=self._admission),
                host, port, reuse_address=True, **tls)  # type: ignore[arg-type]
            self._servers.append(server)
            bound = server.sockets[0].getsockname()[1]
            advertised.append(self._advertised_address(index, scheme, host, bound))
            self._broker.listening("kafka", "{}://{}:{}".format(scheme, *advertised[0]))
            log.info("Kafka listener on %s:%d (%s)", host, bound, scheme)
            bound_listeners.append(f"{scheme}://{f'[{host}]' if ':' in host else host}:{bound}")
        self._broker.bound_setting("kafkaListeners", ",".join(bound_listeners))
        if self._broker.transactions is not None:
            # two hops: the broker queues its coordinator's recovery once its handlers have started,
            # and transactions decided before a crash are ended after it
            loop.call_soon(loop.call_soon, self._recover_transactions)

    def _recover_transactions(self) -> None:
        transactional = self.apis.transactional()
        if transactional is not None:
            self._recovery = asyncio.get_running_loop().create_task(transactional.transactions.recover())

    def _advertised_address(self, index: int, scheme: str, host: str, port: int) -> tuple[str, int]:
        """Where clients of one listener are sent (Metadata, FindCoordinator): the advertised
        listener of its protocol, else the advertised one in its place, else its own address."""
        if self._advertised:
            same = [item for item in self._advertised if item[0] == scheme]
            _, host, port = same[0] if same else self._advertised[min(index, len(self._advertised) - 1)]
            return host, port
        if host in ("0.0.0.0", "::", ""):
            host = self.apis.config.advertisedAddress or "127.0.0.1"
        return host, port

    async def stop(self) -> None:
        self.apis.groups.stop()
        self.apis.produce.states.snapshot_all()
        for server in self._servers:
            server.close()
        for connection in list(self.apis.connections):
            connection.close()
        for server in self._servers:
            await server.wait_closed()
