"""What every admin endpoint shares: Pulsar's JSON errors, a time budget, request parsing."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topic_limits import SCHEMA_STRATEGIES
from magnetar.storage import StorageFullError
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
request_lines = logging.getLogger("magnetar.admin")
#: Bodies are small JSON or a number; aiohttp answers 413 past this (its default, kept).
MAX_BODY_BYTES = 1024 * 1024
#: webServiceRequestTimeoutSeconds: every admin request, its body included, ends within it.
TIME_BUDGET = web.AppKey("time_budget", float)
_NOT_FOUND = {pb.TopicNotFound, pb.SubscriptionNotFound, pb.ConsumerNotFound}
_STATUS_CLASSES: dict[int, type[web.HTTPException]] = {
    400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden, 404: web.HTTPNotFound,
    405: web.HTTPMethodNotAllowed, 408: web.HTTPRequestTimeout,
    409: web.HTTPConflict, 412: web.HTTPPreconditionFailed, 500: web.HTTPInternalServerError,
    503: web.HTTPServiceUnavailable,
}


def fail(status: int, reason: str) -> web.HTTPException:
    """An HTTP error carrying Pulsar's body, `{"reason": ...}`."""
    return _STATUS_CLASSES.get(status, web.HTTPBadRequest)(
        text=json.dumps({"reason": reason}), content_type="application/json")


def status_of(error: BrokerServiceError) -> int:
    """The HTTP status Pulsar's admin API gives the same failure."""
    if error.http_status is not None:
        return error.http_status
    if error.code in _NOT_FOUND:
        return 404
    if error.code == pb.InvalidTopicName:
        return 412
    return 500 if error.code == pb.MetadataError else 409


@web.middleware
async def request_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One line per admin call: at INFO what changes something or was refused, which an
    operator looks for afterwards; at DEBUG the reads that succeeded, which monitoring
    repeats (stats, /metrics) and which would drown the rest."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _log_request(request, exc.status, exc.text)
        raise
    _log_request(request, response.status, None)
    return response


def _log_request(request: web.Request, status: int, body: str | None) -> None:
    level = logging.DEBUG if request.method in ("GET", "HEAD") and status < 400 else logging.INFO
    if request_lines.isEnabledFor(level):
        request_lines.log(level, "%s %s from %s: %d%s", request.method, request.path_qs, request.remote, status,
                f" {_reason_of(body)}" if status >= 400 else "")


def _reason_of(body: str | None) -> str:
    """The `reason` of one of our error bodies, else the body itself, cut short."""
    try:
        reason = json.loads(body or "").get("reason", body)
    except (ValueError, AttributeError):
        reason = body
    return str(reason or "")[:300]


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure answers Pulsar's JSON `{"reason": ...}`; none escapes as a bare 500."""
    budget = request.app[TIME_BUDGET]
    try:
        async with asyncio.timeout(budget):
            return await handler(request)
    except web.HTTPException:
        raise
    except TimeoutError as exc:  # a body trickled in, or a request that never ends
        raise fail(408, f"request not completed within {budget} s") from exc
    except BrokerServiceError as exc:
        raise fail(status_of(exc), exc.message) from exc
    except StorageFullError as exc:
        log.warning("admin request %s %s: %s", request.method, request.path, exc)
        raise fail(503, f"the broker's disk is full: {exc}") from exc
    except Exception as exc:
        log.exception("admin request %s %s failed", request.method, request.path)
        raise fail(500, "internal broker error") from exc


def int_param(request: web.Request, name: str, default: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise fail(400, f"missing query parameter {name}")
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise fail(400, f"query parameter {name} must be an integer, not {raw!r}") from exc


def bool_param(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


async def json_body(request: web.Request, default: Any = None) -> Any:
    """The request's JSON body (`default` when empty); garbage is a 400 naming the problem."""
    text = await request.text()
    if not text.strip():
        return default
    try:
        return json.loads(text)
    except ValueError as exc:
        raise fail(400, f"the body is not JSON: {exc}") from exc


def no_content() -> web.Response:
    return web.Response(status=204)


#: Checks a policy value from a request body; refuses with 412 naming the policy.
Validator = Callable[[str, Any], Any]


def non_negative_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise fail(412, f"Invalid value for {name}: a non-negative integer is expected")
    return value


def non_negative_number(name: str, value: Any) -> float:
    """Minutes where Pulsar takes whole ones; fractions are accepted, as for the broker keys."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise fail(412, f"Invalid value for {name}: a non-negative number is expected")
    return value


def boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise fail(412, f"Invalid value for {name}: true or false is expected")
    return value


def policy_routes(url: str, name: str, valid: Validator, read: Callable[[web.Request], Any],
                  write: Callable[[web.Request, Any], None]) -> list[web.RouteDef]:
    """GET, POST (the value as the JSON body) and DELETE of one policy at `url`; PUT sets
    too, as Pulsar's paths for some policies (schemaCompatibilityStrategy) take it."""

    async def get(request: web.Request) -> web.Response:
        return web.json_response(read(request))

    async def set_(request: web.Request) -> web.Response:
        write(request, valid(name, await json_body(request)))
        return no_content()

    async def remove(request: web.Request) -> web.Response:
        write(request, None)
        return no_content()

    return [web.get(url, get), web.post(url, set_), web.put(url, set_), web.delete(url, remove)]


def entry_filter_names(name: str, value: Any) -> dict[str, str]:
    """Pulsar's EntryFilters JSON; every named filter must be one the broker can load."""
    from magnetar.broker.entry_filters import load_entry_filter, parse_names  # noqa: PLC0415 (broker-side)

    if not isinstance(value, dict) or not isinstance(value.get("entryFilterNames"), str):
        raise fail(412, f'Invalid value for {name}: {{"entryFilterNames": "a,b"}} is expected')
    for filter_name in parse_names(value["entryFilterNames"]):
        try:
            load_entry_filter(filter_name)
        except (ValueError, ImportError) as exc:
            raise fail(412, f"Invalid value for {name}: {exc}") from exc
    return {"entryFilterNames": value["entryFilterNames"]}


def delayed_delivery_policies(name: str, value: Any) -> dict[str, Any]:
    """Pulsar's DelayedDeliveryPolicies JSON: `active`, `tickTime` (ms) and optionally
    `maxDeliveryDelayInMillis` (0 = no limit)."""
    if not isinstance(value, dict) or not isinstance(value.get("active"), bool):
        raise fail(412, f'Invalid value for {name}: {{"active": true, "tickTime": 1000}} is expected')
    policies = {"active": value["active"], "tickTime": value.get("tickTime", 1000),
                "maxDeliveryDelayInMillis": value.get("maxDeliveryDelayInMillis", 0)}
    for key in ("tickTime", "maxDeliveryDelayInMillis"):
        non_negative_int(f"{name}.{key}", policies[key])
    return policies


def schema_compatibility_strategy(name: str, value: Any) -> str:
    if value not in SCHEMA_STRATEGIES:
        raise fail(412, f"Invalid value for {name}: one of {', '.join(SCHEMA_STRATEGIES)} is expected")
    return value
