"""`/admin/v3/functions`' routes as data: (method, path, name of FunctionsApi's handler).

Both the REST handlers (magnetar.functions.api) and the worker on demand
(magnetar.functions.on_demand, which serves the routes before the handlers' code is loaded)
register from this one table.
"""

from __future__ import annotations

#: A function's code comes in one multipart upload: its routes take bodies up to this.
MAX_CODE_BYTES = 64 * 1024 * 1024
BASE = "/admin/v3/functions/{tenant}/{namespace}"
FN = BASE + "/{name}"
_INSTANCE = "/{instance:[0-9]+}"

ROUTES: list[tuple[str, str, str]] = [
    ("GET", BASE, "list"), ("POST", FN, "create"), ("PUT", FN, "update"), ("DELETE", FN, "delete"),
    ("GET", FN, "get"), ("GET", FN + "/download", "download"),
    *(("GET", FN + instance + f"/{view}", view) for view in ("status", "stats") for instance in ("", _INSTANCE)),
    *(("POST", FN + instance + f"/{verb}", verb) for verb in ("start", "stop", "restart")
      for instance in ("", _INSTANCE)),
    ("POST", FN + "/trigger", "trigger"),
    ("GET", FN + "/state/{key}", "get_state"), ("POST", FN + "/state/{key}", "put_state"),
    ("DELETE", FN + "/state/{key}", "delete_state"), ("POST", FN + "/counter/{key}", "incr"),
]
