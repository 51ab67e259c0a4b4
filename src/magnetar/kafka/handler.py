"""The `kafka` protocol handler: Kafka listeners (KoP's kafkaListeners) onto the broker's topics."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

from magnetar.broker.config import ConfigError
from magnetar.broker.service.protocol_handlers import HandlerBroker
from magnetar.kafka.apis import KafkaApis
from magnetar.kafka.connection import KafkaConnection
from magnetar.kafka.topics import KafkaTopics

log = logging.getLogger(__name__)
#: Room beside maxMessageSize for the request's own fields (as Pulsar pads a frame's limit).
FRAME_PADDING = 64 * 1024


def parse_listeners(value: str, key: str) -> list[tuple[str, str, int]]:
    """`PLAINTEXT://host:port,...` as (scheme, host, port); a ConfigError names the key."""
    listeners = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        parts = urlsplit(item)
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme.upper() != "PLAINTEXT" or port is None:
            raise ConfigError(f"{key}: {item!r} is not PLAINTEXT://host:port (SASL_PLAINTEXT and SSL are not "
                              "implemented yet)")
        listeners.append(("PLAINTEXT", parts.hostname or "0.0.0.0", port))
    if not listeners:
        raise ConfigError(f"{key} is empty: the kafka protocol handler needs PLAINTEXT://host:port")
    return listeners


class KafkaProtocolHandler:
    """Built by the broker with its HandlerBroker when `messagingProtocols` names `kafka`."""

    def __init__(self, broker: HandlerBroker) -> None:
        config = broker.config
        if config.authenticationEnabled or config.authorizationEnabled:
            raise ConfigError("messagingProtocols=kafka: the Kafka listener has no authentication yet (SASL and SSL "
                              "listeners are not implemented), so with authenticationEnabled or authorizationEnabled "
                              "it would let anyone past them; turn them off or drop kafka from messagingProtocols")
        self._listeners = parse_listeners(config.kafkaListeners, "kafkaListeners")
        self._advertised = (parse_listeners(config.kafkaAdvertisedListeners, "kafkaAdvertisedListeners")
                            if config.kafkaAdvertisedListeners else None)
        self._max_frame = config.maxMessageSize + FRAME_PADDING
        self.apis = KafkaApis(KafkaTopics(broker), config)
        self._servers: list[asyncio.Server] = []

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        bound = []
        for _, host, port in self._listeners:
            server = await loop.create_server(lambda: KafkaConnection(self.apis, self._max_frame), host, port,
                                              reuse_address=True)
            self._servers.append(server)
            bound.append((host, server.sockets[0].getsockname()[1]))
            log.info("Kafka listener on %s:%d", *bound[-1])
        if self._advertised:
            host, port = self._advertised[0][1:]
        else:
            host, port = bound[0]
            if host in ("0.0.0.0", "::", ""):
                host = self.apis.config.advertisedAddress or "127.0.0.1"
        self.apis.advertise(host, port)

    async def stop(self) -> None:
        self.apis.groups.coordinator.stop()
        for server in self._servers:
            server.close()
        for connection in list(self.apis.connections):
            connection.close()
        for server in self._servers:
            await server.wait_closed()
