"""The admin API's HTTP server: requests and responses, routes, and the server that
carries them (see server.py for why it is not a web framework)."""

from magnetar.admin.web.messages import (
    FormPart,
    Handler,
    HttpError,
    Middleware,
    Request,
    Response,
    fail,
    json_response,
)
from magnetar.admin.web.routing import MAX_BODY_BYTES, RouteDef, Router, delete, get, post, put, route
from magnetar.admin.web.server import WebServer

__all__ = [
    "MAX_BODY_BYTES", "FormPart", "Handler", "HttpError", "Middleware", "Request", "Response", "RouteDef", "Router",
    "WebServer", "delete", "fail", "get", "json_response", "post", "put", "route",
]
