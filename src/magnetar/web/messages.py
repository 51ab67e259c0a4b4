"""A request and its response, as the handlers see them.

The request's body arrives while its handler runs (the admin API's time budget,
magnetar.admin.responses.errors_as_json, covers a body that trickles in); the route it matched says how
large the body may be, so an upload of function code and a JSON policy have limits of
their own.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.web.routing import RouteDef

Handler = Callable[["Request"], Awaitable["Response"]]
Middleware = Callable[["Request", Handler], Awaitable["Response"]]


class HttpError(Exception):
    """A response raised from anywhere below a handler; the server answers it as is."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status} {body[:200]}")
        self.status = status
        self.text = body
        self.response = Response(status=status, text=body, content_type="application/json")


def fail(status: int, reason: str) -> HttpError:
    """An HTTP error carrying Pulsar's body, `{"reason": ...}`."""
    return HttpError(status, json.dumps({"reason": reason}))


class Response:
    def __init__(self, *, status: int = 200, body: bytes | Sequence[bytes] = b"", text: str | None = None,
                 content_type: str | None = None, headers: Mapping[str, str] | None = None) -> None:
        self.status = status
        self.parts: tuple[bytes, ...] = (
            (text.encode(),) if text is not None else (body,) if isinstance(body, bytes) else tuple(body))
        """The body, in parts sent one after another: a large body made a slice at a time
        (/metrics) is never copied whole to join it."""
        if content_type is None:
            content_type = "text/plain; charset=utf-8" if text is not None else "application/octet-stream"
        elif text is not None and "charset" not in content_type:
            content_type += "; charset=utf-8"
        self.headers: dict[str, str] = {"Content-Type": content_type} if status != 204 else {}
        self.headers.update(headers or {})

    @property
    def body(self) -> bytes:
        return b"".join(self.parts)


def json_response(data: Any, *, status: int = 200) -> Response:
    return Response(status=status, body=json.dumps(data).encode(), content_type="application/json")


def no_content() -> Response:
    return Response(status=204)


PRINCIPAL = "principal"
"""The request's key for who sent it, which an authenticating middleware sets (an object with
a `role`: the admin API's is magnetar.broker's Principal) for the handlers that record who did
something; absent while the server authenticates nobody."""


class Headers(Mapping[str, str]):
    """A request's headers, looked up by name in any case; of a repeated header the first."""

    def __init__(self, pairs: list[tuple[bytes, bytes]]) -> None:
        self._values: dict[str, str] = {}
        for name, value in pairs:
            self._values.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def __getitem__(self, name: str) -> str:
        return self._values[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


class FormPart:
    """One part of a multipart/form-data body."""

    __slots__ = ("data", "filename", "name")

    def __init__(self, name: str, filename: str | None, data: bytes) -> None:
        self.name, self.filename, self.data = name, filename, data


BODY_WINDOW = 64 * 1024
"""Body bytes read ahead of the handler asking for them."""


class Body:
    """The bytes of a request's body as they arrive, up to the route's limit.

    Until its handler asks for them (`want`, from `Request.read`) at most BODY_WINDOW bytes
    are read: past them `hold(True)` stops the connection's reading, and asking resumes it
    (`hold(False)`). A request refused before its body is read (401, 403, 404), or waiting
    behind others, never has more of it in memory, whatever size it declares."""

    def __init__(self, limit: int, declared: int | None, hold: Callable[[bool], None]) -> None:
        self.limit = limit
        self.declared = declared
        self.data = bytearray()
        self.received = 0
        self.complete = asyncio.get_running_loop().create_future()
        self.too_large = declared is not None and declared > limit
        self.aborted = False
        self.wanted = False
        self._hold = hold

    def receive(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if not self.too_large and not self.aborted:
            self.data += chunk
            if len(self.data) > self.limit:
                self.too_large = True
                self.data.clear()
                self.end()
        if not self.wanted and self.received > BODY_WINDOW:
            self._hold(True)

    def want(self) -> None:
        if not self.wanted:
            self.wanted = True
            self._hold(False)

    def abort(self) -> None:
        """No more of it is kept (the client left, or its request was answered without it)."""
        self.aborted = True
        self.data = bytearray()
        self.end()

    def end(self) -> None:
        if not self.complete.done():
            self.complete.set_result(None)


class Target:
    """A request target's parts: as sent (`raw_path`, `path_qs`), decoded (`path`), the query."""

    __slots__ = ("path", "path_qs", "query", "raw_path")

    def __init__(self, target: bytes) -> None:
        """Also of the absolute form (`GET http://host/...`); of a repeated query parameter, the first."""
        self.path_qs = target.decode("latin-1")
        url = urllib.parse.urlsplit(self.path_qs)
        self.raw_path = url.path or "/"
        self.path = urllib.parse.unquote(self.raw_path)
        self.query: dict[str, str] = {}
        for key, value in urllib.parse.parse_qsl(url.query, keep_blank_values=True):
            self.query.setdefault(key, value)


class Request:
    """What a handler reads: the method, the path's parts, the query, headers and body."""

    def __init__(self, method: str, target: Target, headers: Headers, transport: asyncio.Transport,
                 route: tuple[RouteDef, dict[str, str]] | None, body: Body,
                 expects_continue: Callable[[], None] | None) -> None:
        self.method = method
        self.path_qs, self.raw_path, self.path, self.query = target.path_qs, target.raw_path, target.path, target.query
        self.headers = headers
        self.transport = transport
        self.route = route[0] if route is not None else None
        """The route the path matched; None when none did (the handler answers 404 or 405)."""
        self.match_info = route[1] if route is not None else {}
        self._body = body
        self._expects_continue = expects_continue
        self._state: dict[str, Any] = {}

    @property
    def remote(self) -> str | None:
        peer = self.transport.get_extra_info("peername")
        return str(peer[0]) if peer else None

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "application/octet-stream").split(";", 1)[0].strip().lower()

    @property
    def charset(self) -> str:
        for param in self.headers.get("Content-Type", "").split(";")[1:]:
            key, _, value = param.partition("=")
            if key.strip().lower() == "charset":
                return value.strip().strip('"') or "utf-8"
        return "utf-8"

    def __setitem__(self, key: str, value: Any) -> None:
        self._state[key] = value

    def __getitem__(self, key: str) -> Any:
        return self._state[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._state.get(key, default)

    async def read(self) -> bytes:
        """The whole body; 413 past the route's limit. A client that asked to be told before
        it sends (`Expect: 100-continue`) is told here, so a request refused before its body is
        read (401, 404) never uploads it."""
        if not self._body.too_large:
            if self._expects_continue is not None:
                self._expects_continue()
                self._expects_continue = None
            self._body.want()
            await self._body.complete
        if self._body.too_large:
            raise fail(413, f"the request body is over {self._body.limit} bytes")
        if self._body.aborted:
            raise fail(400, "the request body could not be read to its end")
        return bytes(self._body.data)

    async def text(self) -> str:
        data = await self.read()
        try:
            return data.decode(self.charset)
        except (UnicodeDecodeError, LookupError) as exc:
            raise fail(400, f"the body is not {self.charset} text: {exc}") from None

    async def json(self) -> Any:
        text = await self.text()
        try:
            return json.loads(text)
        except ValueError as exc:
            raise fail(400, f"the body is not JSON: {exc}") from None
        except RecursionError:
            raise fail(400, "the body is not JSON this server reads: it is nested too deeply") from None

    async def post(self) -> dict[str, str]:
        """The fields of an application/x-www-form-urlencoded body (of a repeated one, the first)."""
        fields: dict[str, str] = {}
        for key, value in urllib.parse.parse_qsl(await self.text(), keep_blank_values=True):
            fields.setdefault(key, value)
        return fields

    async def form_parts(self) -> list[FormPart]:
        """The parts of a multipart/form-data body. Part headers (quoted parameters, encoded
        file names) are read by the standard library's MIME parser; the part contents are
        cut at the boundary without it, as function code may be tens of megabytes."""
        from email.parser import HeaderParser  # noqa: PLC0415  (only function uploads need it)
        from email.policy import HTTP  # noqa: PLC0415

        parser = HeaderParser(policy=HTTP)
        boundary = parser.parsestr(f"Content-Type: {self.headers.get('Content-Type', '')}\r\n\r\n").get_param(
            "boundary")
        if self.content_type != "multipart/form-data" or not isinstance(boundary, str) or not boundary:
            raise fail(400, "the body is not multipart/form-data with a boundary")
        data, delimiter = await self.read(), b"\r\n--" + boundary.encode("latin-1")
        parts, position = [], _after_line(data, data.find(delimiter[2:]))
        while True:
            head_end = data.find(b"\r\n\r\n", position)
            end = data.find(delimiter, position)
            if position < 0 or head_end < 0 or end < 0 or head_end > end:
                raise fail(400, "the multipart/form-data body is cut short")
            head = parser.parsestr(data[position:head_end].decode("latin-1") + "\r\n\r\n")
            name = head.get_param("name", header="content-disposition")
            if isinstance(name, str):
                parts.append(FormPart(name, head.get_filename(), data[head_end + 4:end]))
            if data.startswith(b"--", end + len(delimiter)):
                return parts
            position = _after_line(data, end + len(delimiter))


def _after_line(data: bytes, position: int) -> int:
    """Where the line after the one at `position` starts (-1: there is none)."""
    if position < 0:
        return -1
    end = data.find(b"\r\n", position)
    return -1 if end < 0 else end + 2
