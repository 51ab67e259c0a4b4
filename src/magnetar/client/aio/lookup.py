"""Topic discovery over the binary protocol: partition counts, owning brokers, namespace listings.

Lookups go to the service URL; a Redirect is followed (up to 20 times, as the C++ client
does) with the `authoritative` flag the previous answer carried, and an answer that says
`proxy_through_service_url` keeps the service URL as the physical address.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.client import errors
from magnetar.client.aio.pool import ConnectionPool
from magnetar.client.url import parse_service_url
from magnetar.wire import client_commands as cc
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAX_REDIRECTS = 20


class LookupService:
    def __init__(self, pool: ConnectionPool, service_url: str, listener_name: str = "",
                 concurrent_lookup_requests: int = 50000) -> None:
        self.pool = pool
        self.service_url = service_url
        self.listener_name = listener_name
        self.tls = parse_service_url(service_url).tls
        """A client that came in over TLS is sent on to brokers' TLS URLs."""
        self._limit = concurrent_lookup_requests
        self._pending = 0

    async def _request(self, url: str, build: Callable[[int], bytes]) -> pb.BaseCommand:
        """One lookup (partition metadata or topic lookup) on `url`'s connection;
        TooManyLookupRequestException at once past `concurrent_lookup_requests` of them in flight,
        counted per client (the official client counts per connection)."""
        if self._pending >= self._limit:
            raise errors.TooManyLookupRequestException(f"{self._pending} lookups already in flight "
                                                       f"(concurrent_lookup_requests={self._limit})")
        self._pending += 1
        try:
            conn = await self.pool.get(url)
            return await conn.request(build)
        finally:
            self._pending -= 1

    async def partitions(self, topic: str, *, auto_create: bool = True) -> int:
        """The partition count (0: not partitioned)."""
        answer = await self._request(self.service_url,
                                     lambda rid: cc.partitioned_metadata(rid, topic, auto_create=auto_create))
        return answer.partitionMetadataResponse.partitions

    async def broker_for(self, topic: str) -> tuple[str, str]:
        """(logical URL, physical URL) of the broker that serves `topic`."""
        url = self.service_url
        authoritative = False
        for _ in range(MAX_REDIRECTS):
            answer = (await self._request(url, lambda rid, a=authoritative: cc.lookup(
                rid, topic, authoritative=a, listener_name=self.listener_name))).lookupTopicResponse
            target = (answer.brokerServiceUrlTls if self.tls else answer.brokerServiceUrl) or url
            if answer.response == pb.CommandLookupTopicResponse.Connect:
                if answer.proxy_through_service_url:
                    return target, self.service_url
                return target, target
            url = target
            authoritative = answer.authoritative
        raise errors.LookupError(f"lookup of {topic} was redirected more than {MAX_REDIRECTS} times")

    async def topics_of_namespace(self, namespace: str, mode: int = pb.CommandGetTopicsOfNamespace.PERSISTENT
                                  ) -> list[str]:
        conn = await self.pool.get(self.service_url)  # not a lookup: concurrent_lookup_requests leaves it be
        answer = await conn.request(lambda rid: cc.topics_of_namespace(rid, namespace, mode))
        return list(answer.getTopicsOfNamespaceResponse.topics)
