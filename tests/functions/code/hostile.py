"""A function that does what a hostile tenant's would: each input is a JSON attempt
`{"do": ..., ...}` and the output says what came of it, `{"ok": true, "result": ...}` or
`{"ok": false, "error": "..."}`; the tests assert on those answers."""

import base64
import gc
import json
import os
import resource
import urllib.error
import urllib.request

from pulsar import Function


def _read(attempt, _context):
    with open(attempt["path"], "rb") as file:
        return base64.b64encode(file.read(64)).decode()


def _list(attempt, _context):
    return sorted(os.listdir(attempt["path"]))


def _write(attempt, _context):
    with open(attempt["path"], "wb") as file:
        file.write(b"x" * attempt.get("size", 1))
    return attempt["path"]


def _kill(attempt, _context):
    os.kill(attempt["pid"], attempt["signal"])
    return "sent"


def _whoami(_attempt, _context):
    with open("/proc/self/oom_score_adj") as adj:
        oom = int(adj.read())
    return {"uid": os.getuid(), "cwd": os.getcwd(), "oom_score_adj": oom, "nice": os.nice(0),
            "core": list(resource.getrlimit(resource.RLIMIT_CORE)), "env": dict(os.environ),
            "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}


def _credential():
    """The credential this instance acts with, as any code in its process can find it."""
    for thing in gc.get_objects():
        headers = getattr(thing, "_headers", None) if type(thing).__name__ == "StateClient" else None
        if headers:
            return headers["Authorization"]
    raise LookupError("no credential in this process")


def _http(attempt, _context):
    """An admin API request with the instance's own credential."""
    body = attempt.get("body")
    request = urllib.request.Request(attempt["url"], method=attempt["method"],
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": _credential(), "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _publish(attempt, context):
    context.publish(attempt["topic"], attempt.get("value", "loot"))
    return "published"


def _secret(attempt, context):
    return context.get_secret(attempt["name"])


def _stats(attempt, _context):
    """Forge this instance's own stats on the pipe the worker reads them from, and keep the
    runtime from sending true ones after them."""
    for thing in gc.get_objects():
        if type(thing).__name__ == "InstanceStats" and thing.stream is not None:
            stream, thing.stream = thing.stream, None
            for line in attempt["lines"]:
                stream.write(line.encode() + b"\n")
            stream.flush()
            return "sent"
    raise LookupError("no stats stream")


def _print(attempt, _context):
    for _ in range(attempt["lines"]):
        print(attempt["text"])
    return "printed"


ATTEMPTS = {"read": _read, "list": _list, "write": _write, "kill": _kill, "whoami": _whoami, "http": _http,
            "publish": _publish, "secret": _secret, "stats": _stats, "print": _print}


class Hostile(Function):
    def process(self, input, context):
        attempt = json.loads(input)
        try:
            return json.dumps({"ok": True, "result": ATTEMPTS[attempt["do"]](attempt, context)})
        except Exception as error:  # what failed is the answer
            return json.dumps({"ok": False, "error": f"{type(error).__name__}: {error}"})
