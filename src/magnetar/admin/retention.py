"""`.../retention` for namespaces and topics, and `.../trim`: Pulsar's paths and bodies."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from magnetar import web
from magnetar.admin.responses import fail, json_body, no_content
from magnetar.broker.policies.backlog_quota import SIZE, BacklogQuota
from magnetar.broker.policies.retention import InvalidRetentionError, Retention, check_against_backlog_quota
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

Read = Callable[[web.Request], Any]
Write = Callable[[web.Request, Any], None]
QuotaOf = Callable[[web.Request], BacklogQuota]


def retention_routes(service: BrokerService, base: str, read: Read, write: Write,
                     quota_of: QuotaOf) -> list[web.RouteDef]:
    """GET, POST and DELETE of `{base}/retention`; a change reaches loaded topics at once."""

    async def get(request: web.Request) -> web.Response:
        return web.json_response(read(request))

    async def set_(request: web.Request) -> web.Response:
        try:
            retention = Retention.from_json(await json_body(request))
            quota = quota_of(request)
            check_against_backlog_quota(retention, quota.limit_size, quota.limit_time)
        except InvalidRetentionError as exc:
            raise fail(412, str(exc)) from exc
        write(request, retention.to_json())
        service.retention_monitor.refresh()
        return no_content()

    async def remove(request: web.Request) -> web.Response:
        write(request, None)
        service.retention_monitor.refresh()
        return no_content()

    url = f"{base}/retention"
    return [web.get(url, get), web.post(url, set_), web.delete(url, remove)]


def retention_value(name: str, value: Any) -> dict[str, Any]:
    """A retention policy as a namespace's creation may carry it; 412 naming the problem."""
    try:
        return Retention.from_json(value).to_json()
    except InvalidRetentionError as exc:
        raise fail(412, f"Invalid value for {name}: {exc}") from exc


def default_size_quota(service: BrokerService, quota_map: dict[str, Any] | None) -> BacklogQuota:
    """The destination_storage quota a retention is checked against: the one set, else the broker's."""
    if quota_map and SIZE in quota_map:
        return BacklogQuota.from_json(quota_map[SIZE])
    config = service.config
    return BacklogQuota(config.backlogQuotaDefaultLimitBytes, config.backlogQuotaDefaultLimitSecond)


async def trim_topics(service: BrokerService, topics: list[PersistentTopic]) -> None:
    """Pulsar's trimTopic: trim now, and answer once it is done. The trim runs in a worker
    thread: it unlinks files and commits metadata, which the event loop must not wait for."""
    loop = asyncio.get_running_loop()
    for topic in topics:
        service.retention_monitor.refresh()
        await loop.run_in_executor(None, topic.ledger.trim)
