"""Topic discovery over the protocol: partitions, namespace listings, owning brokers."""

from __future__ import annotations

from magnetar.client.connection import ClientConnection, PulsarClientError
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand

MAX_REDIRECTS = 8


def partitions_of(conn: ClientConnection, topic: str) -> int:
    """The partition count (0: not partitioned), without creating the topic as a side
    effect: a topic that does not exist raises PulsarServerError(TopicNotFound)."""
    request = pb.CommandPartitionedTopicMetadata(
        topic=topic, request_id=conn.new_request_id(), metadata_auto_creation_enabled=False
    )
    response = conn.request(T(type=T.PARTITIONED_METADATA, partitionMetadata=request))
    return response.partitionMetadataResponse.partitions


def topics_of_namespace(conn: ClientConnection, namespace: str) -> list[str]:
    """The persistent topics of `tenant/namespace`, partitions listed one by one."""
    request = pb.CommandGetTopicsOfNamespace(request_id=conn.new_request_id(), namespace=namespace)
    response = conn.request(T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=request))
    return list(response.getTopicsOfNamespaceResponse.topics)


def lookup(conn: ClientConnection, topic: str) -> str:
    """The service URL of the broker that owns `topic`, following redirects."""
    url = conn.url
    authoritative = False
    asking = conn
    try:
        for _ in range(MAX_REDIRECTS):
            request = pb.CommandLookupTopic(
                topic=topic, request_id=asking.new_request_id(), authoritative=authoritative
            )
            answer = asking.request(T(type=T.LOOKUP, lookupTopic=request)).lookupTopicResponse
            url = (answer.brokerServiceUrlTls if conn.tls else answer.brokerServiceUrl) or url
            if answer.response == pb.CommandLookupTopicResponse.Connect or answer.proxy_through_service_url:
                return conn.url if answer.proxy_through_service_url else url
            authoritative = answer.authoritative
            if asking is not conn:
                asking.close()
            asking = ClientConnection(url, conn.timeout, conn.security)
    finally:
        if asking is not conn:
            asking.close()
    raise PulsarClientError(f"lookup of {topic} was redirected more than {MAX_REDIRECTS} times")
