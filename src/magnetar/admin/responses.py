"""What every admin endpoint shares: Pulsar's JSON errors, a time budget, request parsing."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Callable
from typing import Any

from magnetar import web
from magnetar.broker.entry_filters import EntryFilterProvider, parse_names
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.schema_registry import SCHEMA_STRATEGIES
from magnetar.broker.topics.publish_rate import BYTES, MESSAGES
from magnetar.broker.topics.replicators import BYTES as DISPATCH_BYTES
from magnetar.broker.topics.replicators import MESSAGES as DISPATCH_MESSAGES
from magnetar.broker.topics.replicators import PERIOD as DISPATCH_PERIOD
from magnetar.plugins import PluginError
from magnetar.storage import StorageFullError
from magnetar.web import fail, no_content
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)
_LONGEST = len(str(INT64_MIN))
request_lines = logging.getLogger("magnetar.admin")
_NOT_FOUND = {pb.TopicNotFound, pb.SubscriptionNotFound, pb.ConsumerNotFound}


def status_of(error: BrokerServiceError) -> int:
    """The HTTP status Pulsar's admin API gives the same failure."""
    if error.http_status is not None:
        return error.http_status
    if error.code in _NOT_FOUND:
        return 404
    if error.code == pb.InvalidTopicName:
        return 412
    return 500 if error.code == pb.MetadataError else 409


async def request_log(request: web.Request, handler: web.Handler) -> web.Response:
    """One line per admin call: at INFO what changes something or was refused, which an
    operator looks for afterwards; at DEBUG the reads that succeeded, which monitoring
    repeats (stats, /metrics) and which would drown the rest."""
    try:
        response = await handler(request)
    except web.HttpError as exc:
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


def errors_as_json(budget: float) -> web.Middleware:
    """Every failure answers Pulsar's JSON `{"reason": ...}`; none escapes as a bare 500.
    `budget` is webServiceRequestTimeoutSeconds: every admin request, its body included,
    ends within it."""

    async def as_json(request: web.Request, handler: web.Handler) -> web.Response:
        try:
            async with asyncio.timeout(budget):
                return await handler(request)
        except web.HttpError:
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

    return as_json


def long_int(name: str, text: str) -> int:
    """`text` as Pulsar reads a Java long: 400 when it is no integer (digits, maybe a minus
    sign: no spaces, underscores or other scripts' digits), 412 when it does not fit."""
    if not _INTEGER.fullmatch(text):
        raise fail(400, f"{name} must be an integer, not {text[:40]!r}")
    if len(text) > _LONGEST or not INT64_MIN <= int(text) <= INT64_MAX:
        raise fail(412, f"{name} {text[:40]}{'...' if len(text) > 40 else ''} is out of range: a 64-bit signed "
                        f"integer is expected")
    return int(text)


def int_param(request: web.Request, name: str, default: int | None = None) -> int:
    raw = request.query.get(name)
    if raw is None:
        if default is None:
            raise fail(400, f"missing query parameter {name}")
        return default
    return long_int(f"query parameter {name}", raw)


def path_int(request: web.Request, name: str) -> int:
    """A number in the request's path (`skip/{count}`), as `long_int` reads it."""
    return long_int(name, request.match_info[name])


def bool_param(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


class _OutOfRange(ValueError):
    """A number in a JSON body that no Java long or double holds."""


def _json_long(text: str) -> int:
    if len(text) > _LONGEST or not INT64_MIN <= int(text) <= INT64_MAX:
        raise _OutOfRange(f"the number {text[:40]}{'...' if len(text) > 40 else ''} is out of range: a 64-bit "
                          f"signed integer is expected")
    return int(text)


def _json_double(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _OutOfRange(f"the number {text[:40]} is out of range")
    return value


def _json_constant(name: str) -> float:
    raise _OutOfRange(f"{name} is not a number Pulsar's JSON takes")


async def json_body(request: web.Request, default: Any = None) -> Any:
    """The request's JSON body (`default` when empty); garbage is a 400 naming the problem,
    a number beyond what Pulsar's Java types hold a 412, wherever it is in the body."""
    text = await request.text()
    if not text.strip():
        return default
    try:
        return json.loads(text, parse_int=_json_long, parse_float=_json_double, parse_constant=_json_constant)
    except _OutOfRange as exc:
        raise fail(412, str(exc)) from exc
    except ValueError as exc:
        raise fail(400, f"the body is not JSON: {exc}") from exc
    except RecursionError:
        raise fail(400, "the body is not JSON this broker reads: it is nested too deeply") from None


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


def entry_filter_policy(provider: EntryFilterProvider) -> Validator:
    """Pulsar's EntryFilters JSON; every named filter must be one the broker lets policies
    name (installed, or in `entryFilterNames`): anything else is refused unimported."""

    def valid(name: str, value: Any) -> dict[str, str]:
        if not isinstance(value, dict) or not isinstance(value.get("entryFilterNames"), str):
            raise fail(412, f'Invalid value for {name}: {{"entryFilterNames": "a,b"}} is expected')
        try:
            provider.check(parse_names(value["entryFilterNames"]))
        except PluginError as exc:
            raise fail(412, f"Invalid value for {name}: {exc}") from exc
        return {"entryFilterNames": value["entryFilterNames"]}

    return valid


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


_JAVA_INT_MAX, _JAVA_LONG_MAX = 2**31 - 1, 2**63 - 1


def publish_rate(name: str, value: Any) -> dict[str, int]:
    """Pulsar's PublishRate JSON: messages and bytes a second, each -1 (Pulsar's default for
    one not given) or 0 for no limit; a Java int and long, as Pulsar parses them."""
    if not isinstance(value, dict):
        raise fail(412, f'Invalid value for {name}: {{"{MESSAGES}": 100, "{BYTES}": -1}} is expected')
    rate = {}
    for key, ceiling in ((MESSAGES, _JAVA_INT_MAX), (BYTES, _JAVA_LONG_MAX)):
        given = value.get(key, -1)
        if not isinstance(given, int) or isinstance(given, bool) or not -1 <= given <= ceiling:
            raise fail(412, f"Invalid value for {name}.{key}: an integer from -1 (no limit) to {ceiling} is expected")
        rate[key] = given
    return rate


def dispatch_rate(name: str, value: Any) -> dict[str, Any]:
    """Pulsar's DispatchRate JSON: messages and bytes a period (each -1, Pulsar's default for one
    not given, or 0 for no limit) and the period in seconds. A rate relative to the publish rate
    is refused: magnetar does not apply one."""
    if not isinstance(value, dict):
        raise fail(412, f'Invalid value for {name}: {{"{DISPATCH_MESSAGES}": 100, "{DISPATCH_BYTES}": -1, '
                        f'"{DISPATCH_PERIOD}": 1}} is expected')
    rate: dict[str, Any] = {}
    for key, floor, ceiling in ((DISPATCH_MESSAGES, -1, _JAVA_INT_MAX), (DISPATCH_BYTES, -1, _JAVA_LONG_MAX),
                                (DISPATCH_PERIOD, 1, _JAVA_INT_MAX)):
        given = value.get(key, 1 if key == DISPATCH_PERIOD else -1)
        if not isinstance(given, int) or isinstance(given, bool) or not floor <= given <= ceiling:
            raise fail(412, f"Invalid value for {name}.{key}: an integer from {floor} to {ceiling} is expected")
        rate[key] = given
    if value.get("relativeToPublishRate", False) is not False:
        raise fail(412, f"Invalid value for {name}.relativeToPublishRate: only false is supported")
    rate["relativeToPublishRate"] = False
    return rate


def schema_compatibility_strategy(name: str, value: Any) -> str:
    if value not in SCHEMA_STRATEGIES:
        raise fail(412, f"Invalid value for {name}: one of {', '.join(SCHEMA_STRATEGIES)} is expected")
    return value
