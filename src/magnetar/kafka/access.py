"""What a Kafka connection's role may do, asked of the broker's AuthorizationService per request.

KoP maps Kafka's operations onto Pulsar's permissions, and so does this: producing needs
`produce` on the topic, fetching and a group's offsets `consume`, Metadata and ListOffsets
a lookup (`produce` or `consume`), listing the namespace's topics `consume` on it,
CreateTopics, DeleteTopics, changing a topic's configurations or partitions and deleting
its records a tenant admin. Pulsar has no permission on groups; a group is a subscription,
so group membership needs `consume` on the Kafka namespace. Nor on transactional ids: using
one (Kafka's WRITE and DESCRIBE on it) needs `produce` on the namespace, and the id must be
the role's (the first role to use an id owns it).

Nothing is remembered between requests: every request asks again, so a revoked
permission refuses the connection's next request, as Pulsar closes the producers and
consumers whose role lost it. With authorization off the service allows everything.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from magnetar.broker.auth import operations
from magnetar.broker.auth.authorization import AuthorizationError
from magnetar.broker.auth.operations import Operation
from magnetar.broker.errors import BrokerServiceError, ResourceNotFoundError
from magnetar.broker.service.protocol_handlers import HandlerBroker
from magnetar.kafka.errors import Answer, TxnRefused, Unauthorized, kafka_error
from magnetar.kafka.groups import GroupError
from magnetar.kafka.topics import KafkaTopics, UnknownPartition

#: Kafka's operations in Pulsar's terms (broker.auth.operations).
PRODUCE = operations.PRODUCE
CONSUME = operations.CONSUME
LOOKUP = operations.LOOKUP
LIST_TOPICS = operations.GET_TOPICS
CREATE_TOPIC = operations.CREATE_TOPIC
DELETE_TOPIC = operations.DELETE_TOPIC
GROUP = operations.SUBSCRIBE
TOPIC_POLICY_WRITE = operations.TOPIC_POLICY_WRITE  # AlterConfigs, CreatePartitions: as the admin API's
DELETE_RECORDS = operations.TRIM_TOPIC  # Pulsar's nearest: removing a topic's stored data


class Access:
    """One connection's role (None on a listener without authentication) and its checks, the
    topics of its namespace, and the address of the listener it came in on as its clients
    reach it (advertised in Metadata and FindCoordinator, so a client stays on the listener
    it chose)."""

    def __init__(self, topics: KafkaTopics, role: str | None, address: tuple[str, int]) -> None:
        self._broker: HandlerBroker = topics.broker
        self._namespace = topics.namespace
        self.topics = topics
        self.role = role
        self.address = address

    def topic(self, operation: Operation, topic: str) -> None:
        """Unauthorized unless the role may perform `operation` on Kafka topic `topic`;
        UnknownPartition for a topic of a tenant that does not exist (as Pulsar tells)."""
        try:
            self._broker.authorize(operation, self.role, f"persistent://{self._namespace}/{topic}")
        except AuthorizationError as exc:
            raise Unauthorized(exc.message) from None
        except ResourceNotFoundError:
            raise UnknownPartition(topic) from None
        except BrokerServiceError:
            return  # no topic has that name: the request's own checks say so

    def namespace(self, operation: Operation) -> bool:
        """Whether the role may perform `operation` on the Kafka namespace itself."""
        try:
            self._broker.authorize(operation, self.role, self._namespace)
        except (AuthorizationError, ResourceNotFoundError):
            return False
        return True

    def transactional_ids(self) -> None:
        """TxnRefused(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) unless the role may use
        transactional ids: Kafka's WRITE on a TRANSACTIONAL_ID is `produce` on the namespace
        here (and the id must be the role's own: transactions checks that)."""
        if not self.namespace(PRODUCE):
            raise TxnRefused(ErrorCode.transactional_id_authorization_failed,
                             f"role {self.role!r} may not produce to {self._namespace}: no transactional ids")

    def group(self) -> None:
        """GroupError(GROUP_AUTHORIZATION_FAILED) unless the role may use consumer groups."""
        if not self.namespace(GROUP):
            raise GroupError(ErrorCode.group_authorization_failed)


def refusal(access: Access, operation: Operation, topic: str) -> Answer | None:
    """The error (and reason) a request's topic entry carries when the role may not perform
    `operation` on `topic`; None when it may."""
    try:
        access.topic(operation, topic)
    except (Unauthorized, UnknownPartition) as exc:
        return kafka_error(exc)
    return None
