"""`/admin/v3/functions`: Pulsar's REST paths for functions (multipart uploads of the code,
FunctionConfig JSON, status and stats as pulsar-admin prints them, state), served by the
admin server with the routes the standalone hands it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from magnetar import web
from magnetar.functions.config import ConfigError, FunctionConfig, check_name, parse_json_flag
from magnetar.functions.package import stored_name
from magnetar.functions.stats_view import function_stats, instance_stats
from magnetar.functions.worker import FunctionNotFound, FunctionsWorker
from magnetar.web import PRINCIPAL, fail, no_content

log = logging.getLogger("magnetar.functions")
TRIGGER_TIMEOUT_MS = 10_000
MAX_JSON_PART_BYTES = 1024 * 1024


class FunctionsApi:
    def __init__(self, worker: FunctionsWorker) -> None:
        self.worker = worker

    # -- deployments
    async def list(self, request: web.Request) -> web.Response:
        info = _names(request)
        return web.json_response(self.worker.store.names(info["tenant"], info["namespace"]))

    async def create(self, request: web.Request) -> web.Response:
        fqfn = _fqfn(request)
        parts = await _multipart(request)
        config = _config(request, parts)
        code = parts.get("data")
        if not code:
            raise fail(400, "Function package is not provided (multipart part `data`)")
        if self.worker.store.get(fqfn) is not None:
            raise fail(400, f"Function {config.name} already exists")
        # the name the code was uploaded under, as Pulsar's worker keeps it (pulsar-admin sends `py` as the path
        # it read the file from): a display name and a hint, the worker picks the stored name from it
        config.py = parts.get("data.filename") or config.py or f"{config.name}.py"
        with _refusals():
            await self.worker.create(_check_config(config), code, _role(request))
        return no_content()

    async def update(self, request: web.Request) -> web.Response:
        fqfn = _fqfn(request)
        parts = await _multipart(request)
        changes = _json_part(parts, "functionConfig")
        code = parts.get("data") or None
        if code is not None:
            changes["py"] = parts.get("data.filename") or changes.get("py")
        with _refusals():
            await self.worker.update(fqfn, {**changes, **_names(request)}, code, _role(request))
        return no_content()

    async def download(self, request: web.Request) -> web.Response:
        """The code as it was uploaded (pulsar-admin's `functions download`)."""
        fqfn = _fqfn(request)
        with _refusals():
            config = self.worker.deployment(fqfn).config
        code = self.worker.store.code(fqfn)
        if code is None:
            raise fail(404, f"Function {fqfn} has no code stored")
        name = stored_name(config.py or f"{config.name}.py")  # a plain file name, safe in a header
        return web.Response(body=code, headers={"Content-Disposition": f'attachment; filename="{name}"'})

    async def delete(self, request: web.Request) -> web.Response:
        """Also a function stored under a name that is no longer valid (by an earlier version):
        that one is only taken out of the store."""
        info = request.match_info
        stored = f"{info['tenant']}/{info['namespace']}/{info['name']}"
        fqfn = stored if self.worker.store.exists(stored) else _fqfn(request)
        with _refusals():
            await self.worker.delete(fqfn)
        return no_content()

    async def get(self, request: web.Request) -> web.Response:
        with _refusals():
            return web.json_response(self.worker.deployment(_fqfn(request)).config.to_json())

    # -- running instances
    async def status(self, request: web.Request) -> web.Response:
        with _refusals():
            runtime = self.worker.runtime(_fqfn(request))
            if "instance" in request.match_info:
                return web.json_response(self.worker.instances(runtime, _instance(request))[0].status())
            return web.json_response(runtime.status())

    async def stats(self, request: web.Request) -> web.Response:
        with _refusals():
            runtime = self.worker.runtime(_fqfn(request))
            if "instance" in request.match_info:
                instance = self.worker.instances(runtime, _instance(request))[0]
                return web.json_response(instance_stats(instance.metrics()))
            return web.json_response(function_stats(runtime))

    async def start(self, request: web.Request) -> web.Response:
        with _refusals():
            await self.worker.set_running(_fqfn(request), _instance(request), True)
        return no_content()

    async def stop(self, request: web.Request) -> web.Response:
        with _refusals():
            await self.worker.set_running(_fqfn(request), _instance(request), False)
        return no_content()

    async def restart(self, request: web.Request) -> web.Response:
        with _refusals():
            await self.worker.restart(_fqfn(request), _instance(request))
        return no_content()

    async def trigger(self, request: web.Request) -> web.Response:
        """Send a value to an input and answer with what the function wrote to its output
        (read from the output's end, opened before the value is sent)."""
        parts = await _multipart(request)
        with _refusals():
            config = self.worker.deployment(_fqfn(request)).config
        value = parts.get("dataStream") or parts.get("data")
        if value is None:
            raise fail(400, "Trigger data is not provided (`data` or `dataStream`)")
        topic = (parts.get("topic") or b"").decode(errors="replace") or (config.input_topics or [""])[0]
        if topic not in config.input_topics:
            raise fail(400, f"Function {config.name} has no input topic {topic}")
        from magnetar.client import errors  # noqa: PLC0415 (a client only when a trigger comes, not at start-up)
        from magnetar.client.aio import Client  # noqa: PLC0415
        from magnetar.client.message_id import MessageId  # noqa: PLC0415
        from magnetar.credentials.authentication import AuthenticationToken  # noqa: PLC0415

        assert self.worker.launcher is not None
        # as the requesting role, which must be able to produce to the input and read the output
        with self.worker.acting_as(_role(request), f"trigger of {config.fqfn}") as credential:
            authentication = AuthenticationToken(credential) if credential else None
            async with Client(self.worker.launcher.endpoints.service_url, authentication) as client:
                try:
                    reader = await client.create_reader(config.output, MessageId.latest) if config.output else None
                    producer = await client.create_producer(topic)
                    await producer.send(value)
                    message = await reader.read_next(TRIGGER_TIMEOUT_MS) if reader is not None else None
                except errors.Timeout:
                    raise fail(408, "Request Timed Out") from None
                except errors.AuthorizationError as error:
                    raise fail(403, f"trigger refused: {error}") from None
                except errors.PulsarException as error:
                    raise fail(400, f"trigger failed: {error}") from None
        return web.Response(text=message.data().decode(errors="replace") if message is not None else "")

    # -- state
    async def get_state(self, request: web.Request) -> web.Response:
        fqfn, key = _fqfn(request), request.match_info["key"]
        with _refusals():
            self.worker.deployment(fqfn)
        state = self.worker.store.state(fqfn, key)
        if state is None:
            raise fail(404, f"key '{key}' doesn't exist.")
        return web.json_response(state)

    async def put_state(self, request: web.Request) -> web.Response:
        fqfn, key = _fqfn(request), request.match_info["key"]
        if request.content_type.startswith("multipart/"):
            state: Any = _json_part(await _multipart(request), "state")
        elif request.content_type.endswith("form-urlencoded"):
            state = _json_object("state", str((await request.post()).get("state", "")))
        else:
            state = await request.json()
        with _refusals():
            self.worker.deployment(fqfn)
            if not isinstance(state, dict):
                raise ConfigError("state must be a FunctionState JSON object")
            if state.get("key", key) != key:
                raise ConfigError(f"the state's key {state['key']!r} is not the path's {key!r}")
            try:
                self.worker.store.put_state(fqfn, key, state)
            except (ValueError, TypeError) as error:
                raise ConfigError(f"bad state: {error}") from None
        return no_content()

    async def delete_state(self, request: web.Request) -> web.Response:
        fqfn, key = _fqfn(request), request.match_info["key"]
        with _refusals():
            self.worker.deployment(fqfn)
        if not self.worker.store.delete_state(fqfn, key):
            raise fail(404, f"key '{key}' doesn't exist.")
        return no_content()

    async def incr(self, request: web.Request) -> web.Response:
        """magnetar's: an atomic counter increment for `context.incr_counter`."""
        fqfn, key = _fqfn(request), request.match_info["key"]
        body = await request.json()
        amount = body.get("amount") if isinstance(body, dict) else None
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise fail(400, "amount must be an integer")
        with _refusals():
            self.worker.deployment(fqfn)
        return web.json_response(self.worker.store.incr(fqfn, key, amount))


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The worker's refusals as Pulsar's statuses: 404 for a missing function, 400 for a bad
    config or code."""
    try:
        yield
    except FunctionNotFound as error:
        raise fail(404, str(error)) from None
    except ConfigError as error:
        raise fail(400, str(error)) from None


def _names(request: web.Request) -> dict[str, str]:
    """The path's tenant, namespace and (when there) function name, each a valid name (400
    otherwise: `..` or `%2E%2E` names no function, and no directory)."""
    names = {key: request.match_info[key] for key in ("tenant", "namespace", "name") if key in request.match_info}
    try:
        for key, value in names.items():
            check_name(key, value)
    except ConfigError as error:
        raise fail(400, str(error)) from None
    return names


def _fqfn(request: web.Request) -> str:
    names = _names(request)
    return f"{names['tenant']}/{names['namespace']}/{names['name']}"


def _role(request: web.Request) -> str | None:
    """The role the request authenticated as (None with authentication off)."""
    principal = request.get(PRINCIPAL)
    return principal.role if principal is not None else None



def _instance(request: web.Request) -> int | None:
    text = request.match_info.get("instance")
    return None if text is None else int(text)


async def _multipart(request: web.Request) -> dict[str, Any]:
    """The parts of a multipart body by name (bytes), and each file part's name as
    `<part>.filename`: the code may be larger than the admin API's JSON body limit (its
    routes take up to MAX_CODE_BYTES)."""
    if not request.content_type.startswith("multipart/"):
        raise fail(400, "expected a multipart/form-data body (functionConfig, data)")
    parts: dict[str, Any] = {}
    for part in await request.form_parts():
        parts[part.name] = part.data
        if part.filename:
            parts[f"{part.name}.filename"] = part.filename.rsplit("/", 1)[-1]
    return parts


def _json_part(parts: dict[str, Any], name: str) -> dict[str, Any]:
    """A JSON part (`functionConfig`, `state`), at most MAX_JSON_PART_BYTES: the routes take
    the code's 64 MiB, and a config that large would hold the event loop while it parses."""
    raw = parts.get(name)
    if raw is not None and len(raw) > MAX_JSON_PART_BYTES:
        raise fail(413, f"{name} is {len(raw)} bytes, over the {MAX_JSON_PART_BYTES} accepted")
    return {} if raw is None else _json_object(name, raw.decode(errors="replace"))


def _json_object(name: str, text: str) -> dict[str, Any]:
    """A JSON object a request carries as text (a multipart part, a form field): 400 naming it
    when it is not one."""
    try:
        return parse_json_flag(name, text)
    except ConfigError as error:
        raise fail(400, str(error)) from None


def _config(request: web.Request, parts: dict[str, Any]) -> FunctionConfig:
    data = {**_json_part(parts, "functionConfig"), **_names(request)}
    try:
        return FunctionConfig.from_json(data)
    except (ConfigError, TypeError) as error:
        raise fail(400, str(error)) from None


def _check_config(config: FunctionConfig) -> FunctionConfig:
    try:
        config.check()
    except ConfigError as error:
        raise fail(400, str(error)) from None
    return config
