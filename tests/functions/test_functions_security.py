"""Functions probed as a hostile tenant would (issue 40), on a real broker with token
authentication and authorization and instances in the bubblewrap sandbox: names and file
names that would leave the function's directory, configs that name other tenants' topics,
code that reads the broker's files, signals it, floods its log or forges its stats, and
revocations that must stop a running function. One broker for the module (fn_scene)."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from fn_helpers import CODE, wait_consumers
from fn_scene import Scene, answers, start_scene
from polling import wait_for
from procfs import descendants
from standalone import Standalone

from magnetar.admin_client import AdminClient, AdminError, FunctionsAdmin
from magnetar.admin_client.functions import multipart
from magnetar.functions.sandbox import python_roots


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    started = start_scene(tmp_path_factory.mktemp("fn-security"), "functionInstanceIsolation=bubblewrap")
    yield started
    started.broker.stop()


def upload(config: dict[str, object], code: bytes, filename: str = "hostile.py") -> tuple[bytes, str]:
    return multipart({"functionConfig": (None, "application/json", json.dumps(config).encode()),
                      "data": (filename, "application/octet-stream", code)})


HOSTILE = (CODE / "hostile.py").read_bytes()
BASE = {"className": "hostile.Hostile", "inputs": ["t1/ns/any-in"]}


def attempts(scene: Scene, name: str, *tried: dict[str, object]) -> list[dict[str, object]]:
    """Send each attempt to the hostile function `name` (inputs `<name>-in`, output `<name>-out`)
    and return its answers, in order."""
    client = scene.client("app")
    try:
        out = client.subscribe(f"t1/ns/{name}-out", "check", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(f"t1/ns/{name}-in", batching_enabled=False)
        for attempt in tried:
            producer.send(json.dumps(attempt).encode())
        return answers(out, len(tried))
    finally:
        client.close()


def hostile(scene: Scene, name: str, **config: object) -> dict[str, object]:
    return scene.deploy("fnapp", name, inputs=[f"t1/ns/{name}-in"], output=f"t1/ns/{name}-out", **config)


def test_names_never_lead_out_of_the_functions_directory(scene: Scene) -> None:
    """Issue 40 item 1: `..` as a name removed another namespace's functions and kept the
    broker from starting; every name now follows Pulsar's rules, minus `.` and `..`."""
    keeper = scene.deploy("admin", "keeper", "exclamation.py", "exclamation.ExclamationFunction",
                          namespace="ns2", inputs=["t1/ns2/keeper-in"])
    home = scene.broker.data_dir / "functions" / "t1" / "ns2" / "keeper"
    assert home.is_dir()
    config = {**BASE, "tenant": "t1", "namespace": "ns"}
    for path in ("t1/ns/%2E%2E", "t1/ns/..", "t1/ns/.", "t1/%2E%2E/x", "%2E%2E/ns/x", "t1/ns/a%2Fb", "t1/ns/a%20b",
                 "t1/ns/%2E%2E%2F%2E%2E"):
        body, content_type = upload(config, HOSTILE)
        for method in ("POST", "PUT"):
            status, reply = scene.http(method, f"/admin/v3/functions/{path}", "admin", body, content_type)
            assert status in (400, 404), (method, path, status, reply)
        for method, verb in (("DELETE", ""), ("GET", "/status"), ("POST", "/stop"), ("GET", "/download")):
            status, reply = scene.http(method, f"/admin/v3/functions/{path}{verb}", "admin")
            assert status in (400, 404), (method, path, verb, status, reply)
    assert home.is_dir(), "another namespace's function keeps its files"
    wait_consumers(scene.admin, keeper, 1)
    assert ".." not in scene.functions("admin").list("t1", "ns")
    assert scene.functions("admin").status("t1", "ns2", "keeper")["numRunning"] == 1


def test_the_code_is_stored_under_a_name_the_worker_chooses(scene: Scene, tmp_path: Path) -> None:
    """Issue 40 item 2: `py` (or the upload's file name) wrote the bytes anywhere, even for a
    create then refused (Pulsar's CVE-2024-27317 was of this kind)."""
    target = tmp_path / "planted.py"
    for py, filename in ((str(target), "hostile.py"), ("../" * 20 + str(target)[1:], "hostile.py"),
                         ("hostile.py", "../" * 20 + str(target)[1:])):
        config = {**BASE, "tenant": "t1", "namespace": "ns", "name": "stored", "py": py}
        module = "planted" if "planted" in filename else "hostile"  # a .py's module is named after its file
        for class_name, expected in ((f"{module}.Nope", 400), (f"{module}.Hostile", 204)):
            body, content_type = upload({**config, "className": class_name}, HOSTILE, filename)
            status, reply = scene.http("POST", "/admin/v3/functions/t1/ns/stored", "fnapp", body, content_type)
            assert (status, target.exists()) == (expected, False), (py, filename, reply)
        package = scene.broker.data_dir / "functions" / "t1" / "ns" / "stored" / "package"
        assert [path.name for path in package.iterdir()] == [f"{module}.py"], (py, filename)
        shown = scene.functions("fnapp").get("t1", "ns", "stored")["py"]
        assert "/" not in shown and "\\" not in shown, shown
        scene.functions("fnapp").delete("t1", "ns", "stored")


def test_a_config_larger_than_a_mebibyte_is_refused_before_it_is_parsed(scene: Scene) -> None:
    config = {**BASE, "tenant": "t1", "namespace": "ns", "name": "big", "userConfig": {"x": "y" * (2 << 20)}}
    body, content_type = upload(config, HOSTILE)
    status, reply = scene.http("POST", "/admin/v3/functions/t1/ns/big", "fnapp", body, content_type)
    assert status == 413 and "functionConfig" in reply["reason"], (status, reply)


@pytest.mark.parametrize(("field", "value"), [
    ("inputs", {"inputs": ["persistent://t2/ns/secret"]}),
    ("inputs", {"inputs": ["t1/ns2/other"]}),
    ("customSerdeInputs", {"inputs": [], "customSerdeInputs": {"persistent://t2/ns/secret": "serde.IdentitySerDe"}}),
    ("topicsPattern", {"inputs": [], "topicsPattern": "persistent://t2/ns/.*"}),
    ("output", {"output": "persistent://t2/ns/victim"}),
    ("logTopic", {"logTopic": "persistent://t2/ns/log"}),
    ("deadLetterTopic", {"maxMessageRetries": 1, "deadLetterTopic": "persistent://t2/ns/dlq"}),
])
def test_create_refuses_topics_the_role_may_not_use(scene: Scene, field: str, value: dict[str, object]) -> None:
    """Issue 40 item 3, config alone: inputs in another tenant were copied out, outputs wrote
    into it. The role that deploys must be able to consume the inputs and produce the rest."""
    config = {**BASE, "tenant": "t1", "namespace": "ns", "name": f"bad-{field}", **value}
    with pytest.raises(AdminError) as refused:
        scene.functions("fnapp").create(config, CODE / "hostile.py")
    assert refused.value.status == 403, refused.value
    assert "role 'fnapp' is not authorized" in refused.value.reason
    assert f"bad-{field}" not in scene.functions("admin").list("t1", "ns")


def test_a_role_with_only_functions_deploys_nothing_it_could_not_read(scene: Scene) -> None:
    with pytest.raises(AdminError) as refused:
        scene.functions("fndev").create({**BASE, "tenant": "t1", "namespace": "ns", "name": "dev"},
                                        CODE / "hostile.py")
    assert refused.value.status == 403 and "it needs consume" in refused.value.reason


def test_an_update_acts_as_the_updating_role(scene: Scene) -> None:
    """A function the super user deployed reading another tenant's topic: a role that may
    not read it cannot take the function over by updating it."""
    bridge = scene.deploy("admin", "bridge", "exclamation.py", "exclamation.ExclamationFunction",
                          inputs=["persistent://t2/ns/bridge-in"])
    with pytest.raises(AdminError) as refused:
        scene.functions("fnapp").update({**bridge, "parallelism": 2})
    assert refused.value.status == 403 and "t2/ns/bridge-in" in refused.value.reason
    assert scene.functions("admin").get("t1", "ns", "bridge")["parallelism"] == 1
    scene.functions("admin").delete("t1", "ns", "bridge")


def test_an_instance_acts_as_its_deploying_role(scene: Scene) -> None:
    """What the instance's own credential lets it do is what `fnapp` may: publish in t1/ns,
    read its own state; not publish into t2, nor create a tenant, nor read t2's state."""
    hostile(scene, "acting", secrets={"pw": "s3cret"})
    url = scene.broker.admin_url
    publish_t2, publish_t1, tenant, other_state, own_state, secret = attempts(
        scene, "acting", {"do": "publish", "topic": "persistent://t2/ns/victim"},
        {"do": "publish", "topic": "persistent://t1/ns/fine"},
        {"do": "http", "method": "PUT", "url": f"{url}/admin/v2/tenants/evil",
         "body": {"adminRoles": ["fnapp"], "allowedClusters": ["standalone"]}},
        {"do": "http", "method": "GET", "url": f"{url}/admin/v3/functions/t2/ns/keeper/state/k"},
        {"do": "http", "method": "GET", "url": f"{url}/admin/v3/functions/t1/ns/acting/state/k"},
        {"do": "secret", "name": "pw"})
    assert not publish_t2["ok"] and "Authorization" in publish_t2["error"], publish_t2
    assert publish_t1 == {"ok": True, "result": "published"}
    assert tenant == {"ok": True, "result": 403} and "evil" not in scene.admin.tenants()
    assert other_state == {"ok": True, "result": 403}
    assert own_state == {"ok": True, "result": 404}, "its own state: allowed, and empty"
    assert secret == {"ok": True, "result": "s3cret"}
    with pytest.raises(AdminError):
        scene.admin.stats("persistent://t2/ns/victim")  # never created: nothing was written there


def test_an_instance_sees_none_of_the_brokers_files_processes_or_secrets(scene: Scene) -> None:
    """Issue 40 item 3: a function read the broker's config, token key, ledgers, other
    functions' secrets and the broker's memory, and SIGKILLed the broker."""
    scene.deploy("admin", "other", "exclamation.py", "exclamation.ExclamationFunction", namespace="ns2",
                 inputs=["t1/ns2/other-in"], secrets={"db": "other-tenant-password"})
    hostile(scene, "nosy", resources={"disk": 4 << 20})
    broker = scene.broker
    assert broker.proc is not None
    data = broker.data_dir
    tried = [{"do": "read", "path": str(data / "metadata.db")}, {"do": "list", "path": str(data)},
             {"do": "read", "path": str(scene.key_path)},
             {"do": "list", "path": str(data / "functions" / "t1" / "ns2" / "other")},
             {"do": "read", "path": f"/proc/{broker.proc.pid}/environ"},
             {"do": "kill", "pid": broker.proc.pid, "signal": 9},
             {"do": "write", "path": "/function/hostile.py"}, {"do": "write", "path": "/tmp/big", "size": 8 << 20},
             {"do": "list", "path": "/"}, {"do": "whoami"}]
    *refused, root, me = attempts(scene, "nosy", *tried)
    for attempt, answer in zip(tried, refused, strict=False):
        assert not answer["ok"], (attempt, answer)
    assert "No space left" in refused[-1]["error"], "its /tmp is as big as resources.disk"
    python_tops = {Path(path).parts[1] for path in python_roots()}  # wherever the Python and magnetar live
    assert set(root["result"]) <= {"bin", "dev", "etc", "function", "lib", "lib32", "lib64", "libx32", "proc", "root",
                                   "sbin", "tmp", "usr", *python_tops}, root
    who = me["result"]
    assert who["uid"] == 65534 and who["cwd"] == "/tmp" and who["oom_score_adj"] == 1000
    assert who["nice"] >= 10 and who["core"] == [0, 0]
    assert broker.proc.pid not in who["pids"] and max(who["pids"]) < 100, "a process namespace of its own"
    assert set(who["env"]) <= {"PATH", "LANG", "HOME", "PWD", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONNOUSERSITE",
                               "PYTHONDONTWRITEBYTECODE", "LC_CTYPE"}, who["env"]
    assert broker.proc.poll() is None


@pytest.mark.parametrize(("class_name", "serde"), [
    ("os.system", None), ("subprocess.run", None), ("builtins.eval", None), ("pulsar.Function", None),
    ("json.Hostile", None), ("hostile.Hostile", "pickle.Unpickler"), ("hostile.Hostile", "hostile.process"),
])
def test_class_names_must_be_defined_in_the_uploaded_code(scene: Scene, class_name: str, serde: str | None) -> None:
    """Issue 40 item 3: `className: os.system` ran messages as shell commands. A name is
    refused unless the uploaded code defines it (read with `ast`, nothing imported): also one
    a module of the code would shadow (a `json.py` defining `Hostile`)."""
    config = {**BASE, "tenant": "t1", "namespace": "ns", "name": "named", "className": class_name,
              **({"outputSerdeClassName": serde, "output": "t1/ns/named-out"} if serde else {})}
    filename = "json.py" if class_name.startswith("json.") else "hostile.py"
    body, content_type = upload(config, HOSTILE, filename)
    status, reply = scene.http("POST", "/admin/v3/functions/t1/ns/named", "fnapp", body, content_type)
    assert status == 400, reply
    assert (serde or class_name) in reply["reason"]
    assert "named" not in scene.functions("admin").list("t1", "ns")


def test_a_function_cannot_flood_the_log_nor_break_status_and_metrics(scene: Scene) -> None:
    hostile(scene, "noisy")
    escape = "\x1b[31mFORGED\r2030-01-01 00:00:00 INFO magnetar: forged"
    forged = ['{"numReceived": -5, "latestUserExceptions": [{"exceptionString": 3}]}', "x" * 300_000, "[1, 2]",
              '{"numReceived": "1\\nfake_metric 1", "userMetrics": {"a\\nb": {"sum": "x", "count": 1}}}']
    printed, stats = attempts(scene, "noisy", {"do": "print", "lines": 30_000, "text": "spam " * 20},
                              {"do": "stats", "lines": forged})
    assert printed["ok"] and stats["ok"], (printed, stats)
    hostile(scene, "escape")
    assert attempts(scene, "escape", {"do": "print", "lines": 1, "text": escape})[0]["ok"]
    assert wait_for(lambda: "lines of output not logged" in scene.broker.log(), timeout=20)
    assert wait_for(lambda: "FORGED" in scene.broker.log(), timeout=20)
    log = scene.broker.log()
    assert "\x1b" not in log and "\\x1b[31mFORGED\\x0d2030" in log
    assert log.count("[0] spam") < 5000, "the flood is rate-limited: 30,000 lines sent"
    def status() -> dict[str, object]:
        return scene.functions("admin").status("t1", "ns", "noisy")["instances"][0]["status"]

    assert wait_for(lambda: status()["numReceived"] == 0 and status()["latestUserExceptions"] == [], timeout=10), \
        ("the last snapshot kept only values of the right type", status())
    request = urllib.request.Request(scene.broker.admin_url + "/metrics",
                                     headers={"Authorization": f"Bearer {scene.token('admin')}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        metrics = response.read().decode()
    sample = re.compile(r"(#.*|[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? -?[0-9.e+-]+(inf|nan)?|)")
    assert all(sample.fullmatch(line) for line in metrics.splitlines()), "every line a valid sample"
    assert "fake_metric" not in metrics


def test_revoking_a_permission_stops_the_function_within_seconds(scene: Scene) -> None:
    """The instance holds the role's rights as a client does: a revocation closes its
    consumer and producer at once; granted back, the function goes on with nothing lost."""
    relay = scene.deploy("fnapp", "relay", "exclamation.py", "exclamation.ExclamationFunction",
                         inputs=["t1/ns/relay-in"], output="t1/ns/relay-out")
    client = scene.client("app")
    try:
        out = client.subscribe("t1/ns/relay-out", "check")
        producer = client.create_producer("t1/ns/relay-in")
        producer.send(b"before")
        assert out.receive(30000).data() == b"before!"
        scene.admin.grant_permission("t1/ns", "fnapp", ["functions"])  # produce and consume taken back
        assert wait_for(lambda: not scene.admin.stats("t1/ns/relay-in")["subscriptions"]["t1/ns/relay"]["consumers"]
                        and not scene.admin.stats("t1/ns/relay-out")["publishers"], timeout=10)
        producer.send(b"while revoked")
        with pytest.raises(pulsar.Timeout):
            out.receive(3000)
        scene.admin.grant_permission("t1/ns", "fnapp", ["functions", "produce", "consume"])
        wait_consumers(scene.admin, relay, 1)
        # at least once: "before" may come again (its acknowledgement may not have reached the broker in time)
        assert wait_for(lambda: out.receive(60000).data() == b"while revoked!", timeout=60)
    finally:
        scene.admin.grant_permission("t1/ns", "fnapp", ["functions", "produce", "consume"])
        client.close()


def test_trigger_acts_as_the_requesting_role(scene: Scene) -> None:
    """`trigger` wrote with the broker's credentials, into any tenant: it now sends as the
    role that asks, which must be able to produce to the input and read the output."""
    scene.deploy("admin", "trig", "exclamation.py", "exclamation.ExclamationFunction", inputs=["t1/ns/trig-in"],
                 output="t1/ns/trig-out")
    assert scene.functions("fnapp").trigger("t1", "ns", "trig", b"hi") == "hi!"
    for role, status in (("fndev", 403), ("app", 403), ("t2-admin", 403)):
        with pytest.raises(AdminError) as refused:
            scene.functions(role).trigger("t1", "ns", "trig", b"no")
        assert refused.value.status == status, (role, refused.value)
    scene.deploy("admin", "trig-t2", "exclamation.py", "exclamation.ExclamationFunction",
                 inputs=["persistent://t2/ns/trig-in"])
    with pytest.raises(AdminError) as refused:
        scene.functions("t1-admin").trigger("t1", "ns", "trig-t2", b"into t2")
    assert refused.value.status == 403, refused.value
    assert scene.admin.stats("persistent://t2/ns/trig-in")["msgInCounter"] == 0


def test_code_that_takes_too_long_to_load_is_refused_within_the_request_budget(tmp_path: Path) -> None:
    broker = Standalone(tmp_path / "data", ["webServiceRequestTimeoutSeconds=3"]).start()
    try:
        functions = FunctionsAdmin(AdminClient(broker.admin_url))
        with pytest.raises(AdminError) as refused:
            functions.create({"tenant": "public", "namespace": "default", "name": "slow", "inputs": ["in"],
                              "className": "slow_import.process"}, CODE / "slow_import.py")
        assert refused.value.status == 400 and "took over 2 s" in refused.value.reason, refused.value
        assert functions.list("public", "default") == []
        assert broker.proc is not None
        assert wait_for(lambda: descendants(broker.proc.pid) == [broker.proc.pid], timeout=5), \
            "no check outlives its request"
    finally:
        broker.stop()


def test_no_functions_worker(tmp_path: Path) -> None:
    broker = Standalone(tmp_path / "data", args=["--no-functions-worker"]).start()
    try:
        with pytest.raises(AdminError) as refused:
            FunctionsAdmin(AdminClient(broker.admin_url)).list("public", "default")
        assert refused.value.status == 404
    finally:
        broker.stop()


def test_the_sandbox_required_but_missing_is_said_and_the_broker_runs(tmp_path: Path) -> None:
    """`functionInstanceIsolation=bubblewrap` where bwrap cannot be found: the worker refuses
    (500 naming why) rather than run functions unisolated, and the broker serves on."""
    broker = Standalone(tmp_path / "data", ["functionInstanceIsolation=bubblewrap"], env={"PATH": "/nowhere"}).start()
    try:
        functions = FunctionsAdmin(AdminClient(broker.admin_url))
        with pytest.raises(AdminError) as refused:
            functions.list("public", "default")
        assert refused.value.status == 500
        assert "functionInstanceIsolation=bubblewrap, but bwrap" in broker.log()
        assert "public" in AdminClient(broker.admin_url).tenants()
    finally:
        broker.stop()


def test_a_broker_started_with_a_strict_umask_runs_sandboxed_functions(tmp_path: Path) -> None:
    """The instance reads its code as nobody: the worker makes it readable whatever the
    broker's umask (077 made it the broker's alone)."""
    previous = os.umask(0o077)
    try:
        broker = Standalone(tmp_path / "data", ["functionInstanceIsolation=bubblewrap"]).start()
    finally:
        os.umask(previous)
    try:
        functions = FunctionsAdmin(AdminClient(broker.admin_url))
        config = {"tenant": "public", "namespace": "default", "name": "strict", "inputs": ["strict-in"],
                  "output": "strict-out", "className": "exclamation.ExclamationFunction"}
        functions.create(config, CODE / "exclamation.py")
        wait_consumers(functions.admin, config, 1)
        assert functions.trigger("public", "default", "strict", b"hi") == "hi!"
    finally:
        broker.stop()
