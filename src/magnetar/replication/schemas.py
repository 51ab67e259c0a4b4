"""Schemas given to the remote cluster before the messages written with them, as Pulsar's
replicator's producer registers a message's schema (GET_OR_CREATE_SCHEMA) before it sends it.
The remote numbers its versions itself, so each replicated message's schema version is
rewritten to the remote's (entries.outgoing)."""

from __future__ import annotations

import logging

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.schema_registry import SchemaRegistryService
from magnetar.client import errors
from magnetar.replication.remote import RemoteProducer, RemoteUnavailableError
from magnetar.schemas import schema_id, version_from_bytes
from magnetar.schemas.protocol import to_wire
from magnetar.wire import client_commands as cc
from magnetar.wire.topic_name import TopicName

log = logging.getLogger(__name__)


class SchemaRefusedError(Exception):
    """The remote refused a schema (IncompatibleSchema): what was written with it cannot go there."""


class RemoteSchemas:
    """The versions of one topic's schemas the remote was given over the current producer:
    local version (8 bytes) -> the remote's. Forgotten at every reconnect (the remote's topic
    may have been recreated meanwhile), so each is asked for again once."""

    def __init__(self, registry: SchemaRegistryService, topic: TopicName) -> None:
        self._registry = registry
        self._topic = topic
        self.versions: dict[bytes, bytes] = {}

    def reset(self) -> None:
        self.versions.clear()

    async def register(self, version: bytes, producer: RemoteProducer) -> None:
        """Give the remote the schema of local `version`; SchemaRefusedError if it refuses it,
        RemoteUnavailableError if the producer's connection cannot answer."""
        try:
            found = self._registry.get(self._topic, version)
        except BrokerServiceError:
            # deleted here since (a forced schema deletion): the entries go as they were written
            log.warning("[%s] schema version %s is gone; replicating its messages without it", self._topic,
                        version.hex())
            self.versions[version] = version
            return
        conn = producer.conn
        if conn is None:
            raise RemoteUnavailableError("connection lost")
        schema = to_wire(schema_id(self._topic), found.schema)
        try:
            answer = await conn.request(lambda rid: cc.get_or_create_schema(rid, str(self._topic), schema))
        except errors.IncompatibleSchema as exc:
            raise SchemaRefusedError(f"the remote refused schema version {version_from_bytes(version)} "
                                     f"({found.schema.type.name}): {exc}") from None
        except errors.PulsarException as exc:
            raise RemoteUnavailableError(f"cannot register schema version {version_from_bytes(version)}: {exc}") \
                from exc
        self.versions[version] = answer.getOrCreateSchemaResponse.schema_version
