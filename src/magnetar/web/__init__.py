"""magnetar's HTTP/1.1 server: requests and responses, routes, and the server that carries
them (see server.py for why it is not a web framework). The admin API (magnetar.admin) and
the functions worker's REST API (magnetar.functions) are served on it, and any later HTTP
face of the broker (a web console) will be. Its errors are Pulsar's REST errors (`fail`:
a status and `{"reason": ...}`), as every API served on it is Pulsar's.

Layering: generic HTTP, so it imports nothing of magnetar; beside magnetar.broker and
magnetar.client, which it never imports (what a route does with the broker is its
handler's, in the package above that serves it). Enforced by import-linter (pyproject.toml).
"""

from magnetar.web.messages import (
    PRINCIPAL,
    FormPart,
    Handler,
    HttpError,
    Middleware,
    Request,
    Response,
    fail,
    json_response,
    no_content,
)
from magnetar.web.routing import MAX_BODY_BYTES, RouteDef, Router, delete, get, post, put, route
from magnetar.web.server import WebServer

__all__ = [
    "MAX_BODY_BYTES", "PRINCIPAL", "FormPart", "Handler", "HttpError", "Middleware", "Request", "Response", "RouteDef",
    "Router", "WebServer", "delete", "fail", "get", "json_response", "no_content", "post", "put", "route",
]
