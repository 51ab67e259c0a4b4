"""`.../backlogQuotaMap` and `.../backlogQuota?backlogQuotaType=...` for namespaces and topics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magnetar import web
from magnetar.admin.responses import fail, json_body, no_content
from magnetar.broker.policies.backlog_quota import AGE, SIZE, BacklogQuota

QuotaMap = dict[str, Any]


def quota_map_value(name: str, value: Any) -> QuotaMap:
    """Pulsar's backlog_quota_map as a namespace's creation may carry it: quotas by type."""
    if not isinstance(value, dict) or not set(value) <= {SIZE, AGE}:
        raise fail(412, f"Invalid value for {name}: {{{SIZE!r}: quota, {AGE!r}: quota}} is expected")
    try:
        return {kind: BacklogQuota.from_json(quota).to_json() for kind, quota in value.items()}
    except ValueError as exc:
        raise fail(412, f"Invalid value for {name}: {exc}") from exc


def backlog_quota_routes(base: str, read: Callable[[web.Request], QuotaMap | None],
                         write: Callable[[web.Request, QuotaMap | None], None]) -> list[web.RouteDef]:
    """Pulsar's three backlog quota endpoints on `base` (a namespace or a topic path)."""

    def quota_type(request: web.Request) -> str:
        kind = request.query.get("backlogQuotaType", SIZE)
        if kind not in (SIZE, AGE):
            raise fail(412, f"backlogQuotaType must be {SIZE} or {AGE}")
        return kind

    async def get_map(request: web.Request) -> web.Response:
        return web.json_response(read(request) or {})

    async def set_quota(request: web.Request) -> web.Response:
        kind = quota_type(request)
        try:
            quota = BacklogQuota.from_json(await json_body(request))
        except ValueError as exc:
            raise fail(412, f"Invalid backlog quota: {exc}") from exc
        write(request, {**(read(request) or {}), kind: quota.to_json()})
        return no_content()

    async def remove_quota(request: web.Request) -> web.Response:
        kind = quota_type(request)
        remaining = {k: v for k, v in (read(request) or {}).items() if k != kind}
        write(request, remaining or None)
        return no_content()

    return [web.get(f"{base}/backlogQuotaMap", get_map), web.post(f"{base}/backlogQuota", set_quota),
            web.delete(f"{base}/backlogQuota", remove_quota)]
