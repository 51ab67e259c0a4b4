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
from dataclasses import dataclass, field

from magnetar.admin.web.messages import Handler, fail

#: Bodies are small JSON or a number: the admin API answers 413 past this.
MAX_BODY_BYTES = 1024 * 1024
METHODS = ("GET", "POST", "PUT", "DELETE")
_PART = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::([^{}]+))?\}")


@dataclass(frozen=True)
class RouteDef:
    method: str
    pattern: str
    handler: Handler
    max_body: int = MAX_BODY_BYTES
    canonical: str = field(init=False)
    """The pattern without its parts' regexes: the route's name in admin.operations' table."""
    regex: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"route {self.pattern}: method {self.method} is not one of {', '.join(METHODS)}")
        object.__setattr__(self, "canonical", _PART.sub(lambda m: "{" + m.group(1) + "}", self.pattern))
        object.__setattr__(self, "regex", _compile(self.pattern))


def _compile(pattern: str) -> re.Pattern[str]:
    out, end = [], 0
    for part in _PART.finditer(pattern):
        out += [re.escape(pattern[end:part.start()]), f"(?P<{part.group(1)}>{part.group(2) or '[^/]+'})"]
        end = part.end()
    out.append(re.escape(pattern[end:]))
    return re.compile("".join(out))


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
        wanted = "GET" if method == "HEAD" else method
        for candidate in self.routes:
            if candidate.method == wanted and (match := candidate.regex.fullmatch(raw_path)):
                return candidate, {name: urllib.parse.unquote(value) for name, value in match.groupdict().items()}
        return None

    async def refusal(self, method: str, raw_path: str) -> None:
        """404 for a path no route has, 405 (with what is allowed) for one that has other methods."""
        allowed = sorted({r.method for r in self.routes if r.regex.fullmatch(raw_path)})
        if not allowed:
            raise fail(404, f"no admin API path {urllib.parse.unquote(raw_path)[:200]}")
        error = fail(405, f"{method} is not allowed here: {', '.join(allowed)} is")
        error.response.headers["Allow"] = ", ".join(allowed + (["HEAD"] if "GET" in allowed else []))
        raise error
