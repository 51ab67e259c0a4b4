"""Routes: a method, a path pattern in Pulsar's REST style (`/admin/v2/{tenant}/...`, a part
`{name:regex}` when it must be one of a few words), a handler, and how large a body the
handler takes.

A pattern part matches within one path segment of the request as sent, so an encoded
slash (`%2F`) stays inside its part; the matched values are then decoded. Routes are
tried in the order added, the first matching one wins.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

from magnetar.web.messages import Handler, fail

#: Bodies are small JSON or a number: the admin API answers 413 past this.
MAX_BODY_BYTES = 1024 * 1024
METHODS = ("GET", "POST", "PUT", "DELETE")
_PART = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([^{}]+))?\}")


class RouteDef:
    """A route, matched segment by segment: a start compiles nothing but a pattern part's
    own regex (`{domain:persistent|non-persistent}`), which the few routes that have one share."""

    __slots__ = ("_segments", "canonical", "handler", "max_body", "method", "pattern")

    def __init__(self, method: str, pattern: str, handler: Handler, max_body: int = MAX_BODY_BYTES) -> None:
        if method not in METHODS:
            raise ValueError(f"route {pattern}: method {method} is not one of {', '.join(METHODS)}")
        self.method, self.pattern, self.handler, self.max_body = method, pattern, handler, max_body
        self._segments = tuple(_segment(pattern, text) for text in pattern.split("/"))
        self.canonical = "/".join(text if name is None else f"{{{name}}}" for text, name, _ in self._segments)
        """The pattern without its parts' regexes: the route's name in admin.operations' table."""

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The decoded parts of a path split at its slashes as sent; None when it does not match."""
        if len(segments) != len(self._segments):
            return None
        parts = {}
        for given, (text, name, regex) in zip(segments, self._segments, strict=True):
            if name is None:
                if given != text:
                    return None
            elif not given or (regex is not None and not regex.fullmatch(given)):
                return None
            else:
                parts[name] = urllib.parse.unquote(given)
        return parts

    def __repr__(self) -> str:
        return f"RouteDef({self.method} {self.pattern})"


def _segment(pattern: str, text: str) -> tuple[str, str | None, re.Pattern[str] | None]:
    """(the literal text, or the part's name and regex) of one segment of a pattern."""
    if "{" not in text and "}" not in text:
        return text, None, None
    part = _PART.fullmatch(text)
    if part is None:
        raise ValueError(f"route {pattern}: {text!r} must be a whole segment, `{{name}}` or `{{name:regex}}`")
    return text, part.group(1), re.compile(part.group(2)) if part.group(2) else None


def route(method: str, pattern: str, handler: Handler, *, max_body: int = MAX_BODY_BYTES) -> RouteDef:
    return RouteDef(method, pattern, handler, max_body)


def get(pattern: str, handler: Handler) -> RouteDef:
    return RouteDef("GET", pattern, handler)


def post(pattern: str, handler: Handler) -> RouteDef:
    return RouteDef("POST", pattern, handler)


def put(pattern: str, handler: Handler) -> RouteDef:
    return RouteDef("PUT", pattern, handler)


def delete(pattern: str, handler: Handler) -> RouteDef:
    return RouteDef("DELETE", pattern, handler)


class Router:
    def __init__(self) -> None:
        self.routes: list[RouteDef] = []

    def add_routes(self, routes: Iterable[RouteDef]) -> list[RouteDef]:
        added = list(routes)
        self.routes += added
        return added

    def resolve(self, method: str, raw_path: str) -> tuple[RouteDef, dict[str, str]] | None:
        """The route for a request (a HEAD is its GET's) and its path's decoded parts; None
        when there is none (the request is then answered by `refusal`)."""
        wanted, segments = "GET" if method == "HEAD" else method, raw_path.split("/")
        for candidate in self.routes:
            if candidate.method == wanted and (parts := candidate.match(segments)) is not None:
                return candidate, parts
        return None

    async def refusal(self, method: str, raw_path: str) -> None:
        """404 for a path no route has, 405 (with what is allowed) for one that has other methods."""
        segments = raw_path.split("/")
        allowed = sorted({r.method for r in self.routes if r.match(segments) is not None})
        if not allowed:
            raise fail(404, f"no admin API path {urllib.parse.unquote(raw_path)[:200]}")
        error = fail(405, f"{method} is not allowed here: {', '.join(allowed)} is")
        error.response.headers["Allow"] = ", ".join(allowed + (["HEAD"] if "GET" in allowed else []))
        raise error
