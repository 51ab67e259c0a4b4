"""`/admin/v2/schemas/...` through a real standalone, with plain HTTP as curl sends it, and
the official client on the same topics: what one registers the other sees."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from pulsar.schema import AvroSchema, Integer, Record, String
from standalone import Standalone

V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "age", "type": ["null", "int"], "default": None}]}
BAD = {**V1, "fields": [{"name": "name", "type": "int"}]}


class User(Record):
    name = String()
    age = Integer()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    standalone = Standalone(tmp_path_factory.mktemp("schema-admin") / "data").start()
    yield standalone
    standalone.stop()


def url(broker: Standalone, name: str, rest: str) -> str:
    return f"{broker.admin_url}/admin/v2/schemas/public/default/{name}/{rest}"


def call(method: str, target: str, body: object = None) -> tuple[int, object]:
    status, _, content = http(method, target, None if body is None else json.dumps(body).encode())
    return status, json.loads(content) if content else None


def payload(definition: object, kind: str = "AVRO", **properties: str) -> dict[str, object]:
    return {"type": kind, "schema": definition if isinstance(definition, str) else json.dumps(definition),
            "properties": properties}


def test_upload_evolve_look_up_delete(broker: Standalone) -> None:
    name = f"admin-{uuid.uuid4().hex[:8]}"
    assert call("GET", url(broker, name, "schema"))[0] == 404
    assert call("POST", url(broker, name, "schema"), payload(V1)) == (200, {"version": {"version": 0}})
    assert call("POST", url(broker, name, "schema"), payload(V2, app="x")) == (200, {"version": {"version": 1}})
    assert call("POST", url(broker, name, "schema"), payload(json.dumps(V1, indent=2))) == \
        (200, {"version": {"version": 0}})
    status, latest = call("GET", url(broker, name, "schema"))
    assert status == 200 and latest["version"] == 1 and latest["type"] == "AVRO"
    assert json.loads(latest["data"]) == V2 and latest["properties"] == {"app": "x"} and latest["timestamp"] > 0
    assert json.loads(call("GET", url(broker, name, "schema/0"))[1]["data"]) == V1
    assert call("GET", url(broker, name, "schema/9"))[0] == 404
    assert [s["version"] for s in call("GET", url(broker, name, "schemas"))[1]["getSchemaResponses"]] == [0, 1]
    assert call("POST", url(broker, name, "version"), payload(V2)) == (200, {"version": 1})
    assert call("POST", url(broker, name, "version"), payload(BAD)) == (200, {"version": -1})
    # incompatible: 409 with the reason; the compatibility check says no without storing
    status, refused = call("POST", url(broker, name, "schema"), payload(BAD))
    assert status == 409 and "FULL" in refused["reason"]
    assert call("POST", url(broker, name, "compatibility"), payload(BAD)) == \
        (200, {"isCompatibility": False, "schemaCompatibilityStrategy": "FULL"})
    assert call("POST", url(broker, name, "compatibility"), payload(V1))[1]["isCompatibility"] is True
    # delete: a tombstone, then a new history under the next numbers
    assert call("DELETE", url(broker, name, "schema")) == (200, {"version": 2})
    assert call("GET", url(broker, name, "schema"))[0] == 404
    assert call("GET", url(broker, name, "schemas")) == (200, {"getSchemaResponses": []})
    assert call("POST", url(broker, name, "schema"), payload(BAD)) == (200, {"version": {"version": 3}})
    assert call("DELETE", url(broker, name, "schema?force=true")) == (200, {"version": 3})
    assert call("POST", url(broker, name, "schema"), payload(V1)) == (200, {"version": {"version": 0}})


@pytest.mark.parametrize(("body", "status", "says"), [
    (payload("{not json"), 422, "Invalid schema definition data for AVRO schema"),
    (payload(V1, kind="AVRO2"), 422, "unknown schema type 'AVRO2'"),
    (payload("x", kind="STRING"), 422, "STRING schema"),
    (payload("", kind="AUTO_CONSUME"), 422, "client-side"),
    (payload("[1]", kind="KEY_VALUE"), 422, '{"key": ..., "value": ...}'),
    ({"schema": "x"}, 400, "schema payload"),
    ({"type": "AVRO", "schema": 5}, 400, "as a string"),
    ({"type": "AVRO", "schema": "\"int\"", "properties": {"a": 1}}, 400, "object of strings"),
])
def test_bad_payloads_are_refused_with_the_reason(broker: Standalone, body: object, status: int, says: str) -> None:
    name = f"bad-{uuid.uuid4().hex[:8]}"
    for path in ("schema", "compatibility"):
        got, answer = call("POST", url(broker, name, path), body)
        assert got == status and says in answer["reason"], (path, answer)
    assert call("GET", url(broker, name, "schemas")) == (200, {"getSchemaResponses": []})


def test_paths_outside_a_namespace_and_bad_versions(broker: Standalone) -> None:
    assert call("GET", f"{broker.admin_url}/admin/v2/schemas/public/nowhere/t/schema")[0] == 404
    status, answer = call("GET", url(broker, "t", "schema/latest"))
    assert status == 400 and "version" in answer["reason"]


def test_key_value_schemas_show_their_two_sides(broker: Standalone) -> None:
    name = f"kv-{uuid.uuid4().hex[:8]}"
    body = payload(json.dumps({"key": "", "value": V1}), kind="KEY_VALUE", **{
        "key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "SEPARATED"})
    assert call("POST", url(broker, name, "schema"), body)[0] == 200
    status, got = call("GET", url(broker, name, "schema"))
    assert status == 200 and got["type"] == "KEY_VALUE" and json.loads(got["data"]) == {"key": "", "value": V1}
    assert got["properties"]["kv.encoding.type"] == "SEPARATED"
    changed_key = payload(json.dumps({"key": "", "value": V1}), kind="KEY_VALUE", **{
        "key.schema.type": "INT64", "value.schema.type": "AVRO"})
    status, refused = call("POST", url(broker, name, "schema"), changed_key)
    assert status == 409 and "key type changes from STRING to INT64" in refused["reason"]


def test_the_rest_api_and_the_binary_protocol_share_the_registry(broker: Standalone) -> None:
    name = f"shared-{uuid.uuid4().hex[:8]}"
    schema = AvroSchema(User)
    definition = schema.schema_info().schema()
    assert call("POST", url(broker, name, "schema"), payload(definition))[1] == {"version": {"version": 0}}
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(f"persistent://public/default/{name}", schema=schema)
        consumer = client.subscribe(f"persistent://public/default/{name}", "s", schema=schema)
        producer.send(User(name="a", age=1))
        assert consumer.receive(10_000).schema_version() in ("\x00" * 8, b"\x00" * 8)
        assert call("POST", url(broker, name, "schema"), payload(BAD))[0] == 409
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(f"persistent://public/default/{name}", schema=AvroSchema(
                type("User", (Record,), {"name": Integer()})))
    finally:
        client.close()


def magnetar_admin(broker: Standalone, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url, *args],
                          capture_output=True, text=True, timeout=60, check=False)


RECORD_FILE = '''
from pulsar.schema import Integer, Record, String

class Order(Record):
    id = String()
    quantity = Integer()
'''


def test_the_cli_verbs(broker: Standalone, tmp_path: Path) -> None:
    """`magnetar admin schemas` as an operator types pulsar-admin's."""
    name = f"persistent://public/default/cli-{uuid.uuid4().hex[:8]}"
    payload_file = tmp_path / "schema.json"
    payload_file.write_text(json.dumps(payload(V1)))
    upload = magnetar_admin(broker, "schemas", "upload", name, "-f", str(payload_file))
    assert upload.returncode == 0 and "schema version 0" in upload.stdout, upload.stderr
    payload_file.write_text(json.dumps(payload(V2)))
    assert json.loads(magnetar_admin(broker, "--json", "schemas", "compatibility", name, "-f",
                                     str(payload_file)).stdout)["isCompatibility"] is True
    assert magnetar_admin(broker, "schemas", "upload", name, "--filename", str(payload_file)).returncode == 0
    latest = json.loads(magnetar_admin(broker, "--json", "schemas", "get", name).stdout)
    assert latest["version"] == 1 and json.loads(latest["data"]) == V2
    assert json.loads(magnetar_admin(broker, "--json", "schemas", "get", name, "--version", "0").stdout)["version"] == 0
    for json_flag in (["--json"], []):  # every version is JSON, as plain `get` prints one (not a Python repr)
        every = magnetar_admin(broker, *json_flag, "schemas", "get", name, "-a").stdout
        assert [s["version"] for s in json.loads(every)] == [0, 1], every
    payload_file.write_text(json.dumps(payload(BAD)))
    refused = magnetar_admin(broker, "schemas", "upload", name, "-f", str(payload_file))
    assert refused.returncode == 1 and "FULL" in refused.stderr
    assert "deleted at version 2" in magnetar_admin(broker, "schemas", "delete", name).stdout
    # extract: the schema of a Python Record class, printed (--dry-run) or registered
    (tmp_path / "orders.py").write_text(RECORD_FILE)
    dry = magnetar_admin(broker, "--json", "schemas", "extract", name, "-j", str(tmp_path / "orders.py"),
                         "-c", "Order", "-t", "avro", "--dry-run")
    assert json.loads(json.loads(dry.stdout)["schema"])["name"] == "Order", dry.stderr
    extracted = magnetar_admin(broker, "schemas", "extract", name, "-j", str(tmp_path / "orders.py"), "-c", "Order",
                               "-t", "avro")
    assert "schema version 3" in extracted.stdout, extracted.stderr
    assert magnetar_admin(broker, "schemas", "delete", name, "--force").returncode == 0


@pytest.mark.parametrize(("args", "says"), [
    (["upload", "t", "-f", "/nonexistent/schema.json"], "--filename /nonexistent/schema.json"),
    (["extract", "t", "-j", "no_such_module_x", "-c", "C", "-t", "avro"], "--jar no_such_module_x"),
    (["extract", "t", "-j", "json", "-c", "Nope", "-t", "avro"], "--classname Nope"),
])
def test_cli_mistakes_name_the_flag(broker: Standalone, args: list[str], says: str) -> None:
    result = magnetar_admin(broker, "schemas", *args)
    assert result.returncode == 2 and says in result.stderr, result.stderr


def test_the_cli_sets_the_schema_policies(broker: Standalone) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:8]}"
    assert http("PUT", f"{broker.admin_url}/admin/v2/namespaces/{ns}", b"{}")[0] == 204
    for verb in ("schema-validation-enforce", "is-allow-auto-update-schema"):
        assert magnetar_admin(broker, "namespaces", f"set-{verb}", ns, "--enable").returncode == 0
        assert magnetar_admin(broker, "namespaces", f"get-{verb}", ns).stdout.strip() == "true"
        assert magnetar_admin(broker, "namespaces", f"set-{verb}", ns, "-d").returncode == 0
        assert magnetar_admin(broker, "namespaces", f"get-{verb}", ns).stdout.strip() == "false"
        both = magnetar_admin(broker, "namespaces", f"set-{verb}", ns, "-e", "-d")
        assert both.returncode == 2 and "--enable" in both.stderr
    policies = json.loads(magnetar_admin(broker, "--json", "namespaces", "policies", ns).stdout)
    assert (policies["schema_validation_enforced"], policies["is_allow_auto_update_schema"]) == (False, False)
    topic_name = f"persistent://{ns}/t"
    assert magnetar_admin(broker, "topics", "set-schema-validation-enforce", topic_name, "-e").returncode == 0
    assert magnetar_admin(broker, "topics", "get-schema-validation-enforce", topic_name).stdout.strip() == "true"
