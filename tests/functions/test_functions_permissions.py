"""Who may do what with functions, as docs/security.md's functions table says, checked verb by
verb and role by role against a real broker with real tokens and HTTP requests. The
expectations are the user's table (the documentation), not the code's route table, so a
route given the wrong rule fails here (issue 40's audit found a test that derived both from
one table)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fn_helpers import CODE
from fn_scene import Scene, start_scene

from magnetar.admin_client.functions import multipart

DOC = Path(__file__).parents[2] / "docs" / "security.md"
BEGIN, END = "<!-- functions permission table", "<!-- end of the functions permission table -->"
COLUMNS = {"super user": "admin", "tenant admin": "t1-admin", "`functions`": "fndev",
           "`functions`, `produce`, `consume`": "fnapp", "`produce`, `consume`": "app", "`produce`": "ingest",
           "`consume`": "reader", "another tenant's admin": "t2-admin"}
BASE = "/admin/v3/functions/t1/ns"
CONFIG = {"tenant": "t1", "namespace": "ns", "className": "exclamation.ExclamationFunction",
          "inputs": ["t1/ns/target-in"], "output": "t1/ns/target-out"}


def documented() -> dict[str, dict[str, bool]]:
    """verb -> role -> allowed, read from the documentation's table."""
    text = DOC.read_text()
    rows = [line for line in text[text.index(BEGIN):text.index(END)].splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    table = {}
    for row in rows[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        verb = cells[0].split(":", 1)[0]
        table[verb] = {COLUMNS[column]: cell == "yes" for column, cell in zip(header[1:], cells[1:], strict=True)}
    return table


TABLE = documented()


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    started = start_scene(tmp_path_factory.mktemp("fn-permissions"))
    started.deploy("admin", "target", "exclamation.py", "exclamation.ExclamationFunction",
                   inputs=["t1/ns/target-in"], output="t1/ns/target-out")
    yield started
    started.broker.stop()


def upload(config: dict[str, object]) -> tuple[bytes, str]:
    return multipart({"functionConfig": (None, "application/json", json.dumps(config).encode()),
                      "data": ("exclamation.py", "application/octet-stream", (CODE / "exclamation.py").read_bytes())})


Request = Callable[[Scene, str | None], tuple[int, object]]


def _create(scene: Scene, role: str | None) -> tuple[int, object]:
    name = f"new-{role}"
    body, content_type = upload({**CONFIG, "name": name})
    answer = scene.http("POST", f"{BASE}/{name}", role, body, content_type)
    if answer[0] == 204:
        scene.functions("admin").delete("t1", "ns", name)
    return answer


def _update(scene: Scene, role: str | None) -> tuple[int, object]:
    body, content_type = upload({**CONFIG, "name": "target"})
    return scene.http("PUT", f"{BASE}/target", role, body, content_type)


def _trigger(scene: Scene, role: str | None) -> tuple[int, object]:
    body, content_type = multipart({"data": (None, "text/plain", b"hello")})
    return scene.http("POST", f"{BASE}/target/trigger", role, body, content_type)


def _plain(method: str, path: str, body: object = None) -> Request:
    data = None if body is None else json.dumps(body).encode()
    return lambda scene, role: scene.http(method, BASE + path, role, data)


# start, stop, restart and delete ask for a function that does not exist: an allowed role
# learns so (404), a refused one is refused first (403), and the target keeps running
REQUESTS: dict[str, list[Request]] = {
    "list": [_plain("GET", "")],
    "create": [_create],
    "update": [_update],
    "delete": [_plain("DELETE", "/absent")],
    "get": [_plain("GET", "/target")],
    "download": [_plain("GET", "/target/download")],
    "status": [_plain("GET", "/target/status"), _plain("GET", "/target/0/status")],
    "stats": [_plain("GET", "/target/stats"), _plain("GET", "/target/0/stats")],
    "start": [_plain("POST", "/absent/start"), _plain("POST", "/absent/0/start")],
    "stop": [_plain("POST", "/absent/stop"), _plain("POST", "/absent/0/stop")],
    "restart": [_plain("POST", "/absent/restart"), _plain("POST", "/absent/0/restart")],
    "trigger": [_trigger],
    "state get": [_plain("GET", "/target/state/k")],
    "state put": [_plain("POST", "/target/state/k", {"key": "k", "stringValue": "v"})],
    "state delete": [_plain("DELETE", "/target/state/absent")],
    "counter": [_plain("POST", "/target/counter/k", {"amount": 1})],
}


def test_the_table_names_every_verb() -> None:
    assert set(TABLE) == set(REQUESTS)


@pytest.mark.parametrize("verb", sorted(REQUESTS))
def test_each_role_may_do_what_the_table_says(scene: Scene, verb: str) -> None:
    for role, allowed in TABLE[verb].items():
        for request in REQUESTS[verb]:
            status, reply = request(scene, role)
            if allowed:
                assert status in (200, 204, 404), (verb, role, status, reply)
            else:
                assert status == 403, (verb, role, status, reply)
    for request in REQUESTS[verb]:
        assert request(scene, None)[0] == 401, (verb, "no token")
