"""The commands that find topics rather than use them: PARTITIONED_METADATA, LOOKUP,
GET_TOPICS_OF_NAMESPACE (the schema commands are in schema_commands). Each is authorized by its operation
(broker.auth.operations.COMMANDS) before it answers.

Functions of the connection they came on (a CommandHost), in the connection's table of
handlers, like consumer_commands, so that the connection itself reads as transport,
framing and the producer path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.auth.operations import COMMANDS
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.transport.advertised_listeners import ListenerNotFoundError
from magnetar.broker.transport.topic_list import broker_side_pattern, topics_hash
from magnetar.wire import commands
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.transport.seams import CommandHost

log = logging.getLogger("magnetar.broker.transport.connection")
T = pb.BaseCommand


def handle_partitioned_metadata(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.partitionMetadata
    try:
        if not cnx.service.is_coordinator_topic(req.topic):
            cnx.authorize(COMMANDS[T.PARTITIONED_METADATA], req.topic)
        partitions = cnx.service.partitioned_metadata(req.topic, auto_create=req.metadata_auto_creation_enabled)
    except BrokerServiceError as exc:
        _log_refused_lookup(cnx, req.topic, exc)
        cnx.send(commands.partitioned_metadata_error(req.request_id, exc.code, exc.message))
        return
    cnx.send(commands.partitioned_metadata_response(req.request_id, partitions))


def handle_lookup(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.lookupTopic
    service = cnx.service
    try:
        if not service.is_coordinator_topic(req.topic):
            cnx.authorize(COMMANDS[T.LOOKUP], req.topic)
        topic = service.parse_topic(req.topic)
        if not service.topic_exists(topic) and not service.config.allowAutoTopicCreation:
            raise BrokerServiceError(pb.TopicNotFound, f"Topic {req.topic} does not exist")
        listener = service.listeners.resolve(req.advertised_listener_name)
    except BrokerServiceError as exc:
        _log_refused_lookup(cnx, req.topic, exc)
        cnx.send(commands.lookup_error(req.request_id, exc.code, exc.message))
        return
    except ListenerNotFoundError as exc:
        cnx.send(commands.lookup_error(req.request_id, pb.ServiceNotReady, str(exc)))
        return
    cnx.lookup_listener = listener
    cnx.send(commands.lookup_connect(req.request_id, listener.broker_service_url, listener.broker_service_url_tls))


def _log_refused_lookup(cnx: CommandHost, topic: str, exc: BrokerServiceError) -> None:
    """A refused lookup is where a client's mistake (a typo'd namespace, a topic that may
    not be auto-created, a role without rights) first shows."""
    log.info("%s lookup of %s refused: %s: %s", cnx, topic, pb.ServerError.Name(exc.code), exc.message)


def handle_get_topics_of_namespace(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.getTopicsOfNamespace
    cnx.authorize(COMMANDS[T.GET_TOPICS_OF_NAMESPACE], namespace=req.namespace)  # a refusal: the connection answers
    pattern = broker_side_pattern(req.topics_pattern, cnx.service.config)
    topics = cnx.service.topics_of_namespace(req.namespace, pattern, mode=req.mode)
    digest = topics_hash(topics)
    unchanged = req.HasField("topics_hash") and req.topics_hash == digest
    cnx.send(commands.topics_of_namespace_response(
        req.request_id, [] if unchanged else topics, topics_hash=digest, filtered=pattern is not None,
        changed=not unchanged))

