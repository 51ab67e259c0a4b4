"""`.../{topic}/compaction`: start a compaction (PUT) and ask how it went (GET), as
pulsar-admin's `topics compact` and `topics compaction-status` do. On a partitioned
topic's name both act on every partition."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from magnetar.admin.responses import fail, no_content
from magnetar.broker.compaction import CompactionStatus
from magnetar.broker.service import BrokerService
from magnetar.broker.topic import PersistentTopic
from magnetar.wire.topic_name import TopicName

#: Which status a partitioned topic reports when its partitions differ: the first found.
_PRECEDENCE = ("RUNNING", "ERROR", "NOT_RUN", "SUCCESS")


def compaction_routes(url: str, service: BrokerService,
                      topic_name: Callable[[web.Request], TopicName]) -> list[web.RouteDef]:

    def targets(request: web.Request) -> list[TopicName]:
        name = topic_name(request)
        partitions = service.partitions_of(name)
        if partitions:
            return [name.partition(i) for i in range(partitions)]
        if not service.topic_exists(name):
            raise fail(404, "Topic not found")
        return [name]

    async def compact(request: web.Request) -> web.Response:
        names = targets(request)
        running = [str(n) for n in names if service.compaction.running(str(n))]
        if running:
            raise fail(409, f"Compaction already in progress on {running[0]}")
        for name in names:
            topic = service.get_topic(str(name))
            assert isinstance(topic, PersistentTopic)  # the route names the persistent domain
            service.compaction.trigger(topic)
        return no_content()

    async def status(request: web.Request) -> web.Response:
        statuses = [service.compaction.status(str(name)) for name in targets(request)]
        return web.json_response(_combined(statuses).to_json())

    return [web.put(url, compact), web.get(url, status)]


def _combined(statuses: list[CompactionStatus]) -> CompactionStatus:
    if len(statuses) == 1:
        return statuses[0]
    found = {s.status for s in statuses}
    status = next(name for name in _PRECEDENCE if name in found)
    errors = "; ".join(s.last_error for s in statuses if s.last_error)
    progress = sum(s.progress for s in statuses) / len(statuses)
    return CompactionStatus(status, errors, progress)
