"""The console's files, served from the package (static/), each with headers that keep a
name or payload the page shows from ever running as script: a Content-Security-Policy
allowing scripts from this origin's files only (no inline script, no eval), no sniffing of
content types, no framing.

Only the files named in FILES are served, whatever the request's path says (`..`, encoded
slashes, other files of the package): a path is looked up in the table, never joined to a
directory.
"""

from __future__ import annotations

from importlib import resources

from magnetar import web

#: Every file the console serves, and its type.
FILES = {
    "index.html": "text/html",
    "console.css": "text/css",
    "favicon.svg": "image/svg+xml",
    "app.js": "text/javascript",
    "api.js": "text/javascript",
    "dom.js": "text/javascript",
    "chart.js": "text/javascript",
    "uplot-1.6.32.esm.js": "text/javascript",  # vendored, MIT (uplot-1.6.32.LICENSE, shipped beside it)
    "uplot-1.6.32.min.css": "text/css",
    "uplot-1.6.32.LICENSE": "text/plain",
    "views.js": "text/javascript",
    "topic.js": "text/javascript",
    "messages.js": "text/javascript",
    "batch.js": "text/javascript",
    "policies.js": "text/javascript",
    "schemas.js": "text/javascript",
    "decode.js": "text/javascript",
    "functions.js": "text/javascript",
    "produce.js": "text/javascript",
}
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # the files change with the broker's version: the browser asks again rather than keep an old one
    "Cache-Control": "no-cache",
}
_cache: dict[str, bytes] = {}


def serve(request: web.Request) -> web.Response:
    """`/` is the page, `/console/<name>` one of its files; anything else is 404."""
    name = "index.html" if request.raw_path == "/" else request.match_info.get("file", "")
    content_type = FILES.get(name)
    if content_type is None:
        raise web.fail(404, "no such console file")
    data = _cache.get(name)
    if data is None:
        data = _cache[name] = resources.files(__package__).joinpath("static", name).read_bytes()
    return web.Response(body=data, content_type=f"{content_type}; charset=utf-8", headers=HEADERS)
