"""The console's operating views in a real browser against a real standalone: policies of a
namespace and a topic edited through the admin API (and a refusal shown as text), a topic's
schema versions and their diff, subscriptions reset to a message id and a PIP-70 index, and
subscriptions and topics deleted, each behind a confirmation; hostile names as text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import quote

import jwt
import pulsar
import pytest
from admin_http import get_json, http
from console_pages import Watched, checked_page, row_of, started_broker
from polling import wait_for
from pulsar.schema import AvroSchema, Integer, Record, String
from standalone import Standalone

HOSTILE = "<img src=x onerror=window.__xss=7>"
NS = "public/default"


class Order(Record):
    id = Integer()
    item = String()


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    yield from started_broker(tmp_path_factory, "operate")


@pytest.fixture
def page(browser, broker) -> Iterator[Watched]:
    yield from checked_page(browser, broker)


def admin(broker, path: str):
    return get_json(f"{broker.admin_url}/admin/v2/{path}")


def policy_row(p, name: str):
    return p.get_by_test_id("policies").locator("tbody tr").filter(has=p.locator(f"td:text-is('{name}')"))


def save(p, name: str, **fields: str) -> None:
    """Types `fields` (label -> value) into policy `name`'s editor and saves; waits for the outcome."""
    row = policy_row(p, name)
    for label, value in fields.items():
        field = row.get_by_label(f"{name} {label}")
        if field.evaluate("node => node.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)
    outcome = p.get_by_test_id("policy-outcome")
    row.get_by_role("button", name="Save").click()
    assert wait_for(lambda: re.match(f"{re.escape(name)}: [^…]", outcome.inner_text()), 10)


def test_namespace_policies_are_read_and_changed_through_the_admin_api(page, broker):
    p = page.page
    page.open(f"#/namespace/{NS}")
    policy_row(p, "Retention").wait_for()
    assert policy_row(p, "Retention").locator("td").nth(1).inner_text() == "(not set)"
    assert "null" not in p.get_by_test_id("list").inner_text()  # nothing left out shows as a word
    save(p, "Retention", minutes="60", MB="10")
    assert wait_for(lambda: admin(broker, f"namespaces/{NS}/retention") ==
                    {"retentionTimeInMinutes": 60, "retentionSizeInMB": 10}, 10)
    assert wait_for(lambda: policy_row(p, "Retention").locator("td").nth(1).inner_text() == "60 minutes, 10 MB", 10)
    save(p, "Message TTL", seconds="30")
    save(p, "Compaction threshold", bytes="1048576")
    save(p, "Backlog quota (size)", bytes="2000000", **{"when reached": "producer_exception"})
    save(p, "Backlog quota (age)", seconds="3600")
    save(p, "Schema compatibility", strategy="FORWARD")
    assert wait_for(lambda: admin(broker, f"namespaces/{NS}/messageTTL") == 30, 10)
    assert admin(broker, f"namespaces/{NS}/compactionThreshold") == 1048576
    assert admin(broker, f"namespaces/{NS}/schemaCompatibilityStrategy") == "FORWARD"
    assert admin(broker, f"namespaces/{NS}/backlogQuotaMap") == {
        "destination_storage": {"limitSize": 2000000, "limitTime": -1, "policy": "producer_exception"},
        "message_age": {"limitSize": -1, "limitTime": 3600, "policy": "producer_request_hold"}}
    # what the admin API refuses, it says why, shown as text; nothing changed
    save(p, "Message TTL", seconds=HOSTILE)
    outcome = p.get_by_test_id("policy-outcome").inner_text()
    assert outcome.startswith("Message TTL: refused: 412: Invalid value for messageTTL"), outcome
    assert admin(broker, f"namespaces/{NS}/messageTTL") == 30
    # removing asks first
    remove = policy_row(p, "Retention").get_by_role("button", name="Remove")
    remove.click()
    assert admin(broker, f"namespaces/{NS}/retention") is not None
    page.answers = [True]
    remove.click()
    assert wait_for(lambda: admin(broker, f"namespaces/{NS}/retention") is None, 10)
    assert page.dialogs == ["Remove the retention policy of namespace public/default?"] * 2


def test_topic_policies_use_the_topics_own_paths(page, broker, api):
    client = api[1](broker.url)
    client.create_producer("persistent://public/default/ruled").send(b"x")
    p = page.page
    page.open("#/topic/persistent/public/default/ruled")
    policy_row(p, "Message TTL").wait_for()
    save(p, "Message TTL", seconds="45")  # a query parameter on a topic, as Pulsar's path takes it
    save(p, "Retention", minutes="-1", MB="5")
    assert wait_for(lambda: admin(broker, "persistent/public/default/ruled/messageTTL") == 45, 10)
    assert admin(broker, "persistent/public/default/ruled/retention") == {
        "retentionTimeInMinutes": -1, "retentionSizeInMB": 5}
    assert admin(broker, f"namespaces/{NS}/retention") is None  # the namespace's untouched


def test_a_role_that_may_not_read_policies_is_shown_so(browser, broker_factory, tmp_path):
    key = tmp_path / "secret.key"
    key.write_bytes(b"k" * 32)
    secured = broker_factory("authenticationEnabled=true", "authenticationProviders=token", "authorizationEnabled=true",
                             "superUserRoles=admin", f"tokenSecretKey=file://{key}")
    token = jwt.encode({"sub": "reader"}, key.read_bytes(), algorithm="HS256")
    superuser = {"Authorization": "Bearer " + jwt.encode({"sub": "admin"}, key.read_bytes(), algorithm="HS256")}
    grant = f"{secured.admin_url}/admin/v2/namespaces/{NS}/permissions/reader"
    assert http("POST", grant, b'["consume"]', headers=superuser)[0] == 204
    page = Watched(browser, secured.admin_url)
    p = page.page
    page.open(f"#/namespace/{NS}")
    p.get_by_label("Token").fill(token)
    p.get_by_role("button", name="Sign in").click()
    policy_row(p, "Retention").wait_for()
    cells = [policy_row(p, name).locator("td").all_inner_texts() for name in ("Retention", "Schema compatibility")]
    assert cells == [["Retention", "(not allowed to read)", ""], ["Schema compatibility", "(not allowed to read)", ""]]
    assert p.get_by_test_id("policies").get_by_role("button").count() == 0
    assert page.errors == []
    page.close()


def test_schema_versions_and_their_diff(page, broker):
    topic = "persistent://public/default/typed"
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.create_producer(topic, schema=AvroSchema(Order)).send(Order(id=1, item=HOSTILE))
    finally:
        client.close()
    v0 = json.loads(admin(broker, "schemas/public/default/typed/schema")["data"])
    v1 = {**v0, "fields": [*v0["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
    status, _, body = http("POST", f"{broker.admin_url}/admin/v2/schemas/public/default/typed/schema", json.dumps(
        {"type": "AVRO", "schema": json.dumps(v1), "properties": {HOSTILE: "<script>alert(8)</script>"}}).encode())
    assert status == 200, body
    p = page.page
    page.open("#/topic/persistent/public/default/typed")
    diff = p.get_by_test_id("schema-diff")
    diff.wait_for()
    versions = p.get_by_test_id("schemas").locator("tbody tr")
    assert [row.locator("td").nth(0).inner_text() for row in versions.all()] == ["0", "1"]
    assert versions.nth(1).locator("td").nth(3).inner_text() == f"{HOSTILE}=<script>alert(8)</script>"
    added = [line[2:].strip() for line in diff.inner_text().splitlines() if line.startswith("+")]
    assert '"name": "note",' in added and '"default": null' in added
    assert not any(line.startswith("-") for line in diff.inner_text().splitlines())
    p.get_by_label("with version").select_option("0")  # a version against itself: nothing marked
    assert wait_for(lambda: not re.search(r"^[+-]", diff.inner_text(), re.MULTILINE), 5)
    p.get_by_label("Compare version").select_option("1")  # the other way round: the field removed
    assert wait_for(lambda: re.search(r'^-\s+"name": "note",$', diff.inner_text(), re.MULTILINE), 5)
    assert p.locator("main img, main script").count() == 0


def test_reset_to_a_message_id_and_an_index(page, broker, api):
    topic = f"persistent://public/default/rewind-{api[0].__name__.split('.')[0]}"
    client = api[1](broker.url)
    client.subscribe(topic, "ops").close()
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [producer.send(b"m%d" % n) for n in range(5)]
    producer.close()
    path = topic.replace("://", "/")
    status = http("POST", f"{broker.admin_url}/admin/v2/{path}/subscription/ops/skip_all")[0]
    assert status == 204

    def backlog() -> int:
        return admin(broker, f"{path}/stats")["subscriptions"]["ops"]["msgBacklog"]

    p = page.page
    page.open(f"#/topic/{path}")
    to_id = p.get_by_role("button", name="Reset to id…")
    page.answers = ["not an id"]  # nothing asked further, nothing sent
    to_id.click()
    third = f"{sent[2].ledger_id()}:{sent[2].entry_id()}"
    page.answers = [third, True]
    to_id.click()
    assert wait_for(lambda: row_of(p, "ops")[2] == "3" and backlog() == 3, 10)
    page.answers = ["1", True]
    p.get_by_role("button", name="Reset to index…").click()
    # the page first: a Playwright call lets the page's dialogs (the confirm after the look-up) be answered
    assert wait_for(lambda: row_of(p, "ops")[2] == "4" and backlog() == 4, 10)
    page.answers = ["99"]  # past the last index: the admin API's 404, as text
    p.get_by_role("button", name="Reset to index…").click()
    outcome = p.locator("main .outcome").first
    assert wait_for(lambda: outcome.inner_text().startswith("refused: 404: no message with index 99"), 10)
    assert backlog() == 4
    second = f"{sent[1].ledger_id()}:{sent[1].entry_id()}"
    assert page.dialogs == [
        "Reset subscription ops to which message id (ledger:entry)?",
        "Reset subscription ops to which message id (ledger:entry)?",
        f"Move subscription ops to message {third}?",
        "Reset subscription ops to which PIP-70 index?",
        f"Move subscription ops to index 1 (message {second})?",
        "Reset subscription ops to which PIP-70 index?",
    ]


def test_deleting_a_subscription_and_a_topic_asks_first(page, broker, api):
    name = HOSTILE + api[0].__name__.split(".")[0]
    topic = f"persistent://public/default/{name}"
    client = api[1](broker.url)
    client.subscribe(topic, HOSTILE).close()
    client.subscribe(topic, "keep").close()
    producer = client.create_producer(topic)
    producer.send(b"doomed")
    p = page.page
    page.open("#/namespace/public/default")
    p.get_by_role("link", name=name, exact=True).click()
    p.locator("h2:text-is('Subscriptions')").wait_for()
    row = p.locator("tbody tr").filter(has=p.locator(f"td:text-is('{HOSTILE}')")).first
    row.get_by_role("button", name="Delete…").click()  # answered No
    assert HOSTILE in admin(broker, f"persistent/public/default/{quote(name, safe='')}/subscriptions")
    page.answers = [True]
    row.get_by_role("button", name="Delete…").click()
    assert wait_for(lambda: row_of(p, "keep") != [] and row_of(p, HOSTILE) == [], 10)
    # a topic with a producer connected: the admin API refuses, the page says why
    page.answers = [True]
    p.get_by_role("button", name="Delete topic…").click()
    outcome = p.locator("main .outcome").first
    assert wait_for(lambda: outcome.inner_text().startswith("refused: "), 10)
    producer.close()
    page.answers = [True]
    p.get_by_role("button", name="Delete topic…").click()
    p.wait_for_url("**/#/namespace/public/default", timeout=10_000)
    assert topic not in admin(broker, f"namespaces/{NS}/topics")
    assert page.dialogs == [f"Delete subscription {HOSTILE} and its backlog?"] * 2 + [
        f"Delete topic {topic} and all its messages?"] * 2
    assert p.locator("main img").count() == 0



def test_the_browser_decodes_through_the_schema(page, broker, api):
    module, make = api
    schema = module.schema
    namespace = f"public/typed-{module.__name__.split('.')[0]}"
    assert http("PUT", f"{broker.admin_url}/admin/v2/namespaces/{namespace}")[0] == 204
    assert http("POST", f"{broker.admin_url}/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy",
                b'"ALWAYS_COMPATIBLE"')[0] == 204

    class Item(schema.Record):
        id = schema.Integer()
        item = schema.String()

    class Noted(schema.Record):
        id = schema.Integer()
        item = schema.String()
        note = schema.String()

    client = make(broker.url)
    topic = f"persistent://{namespace}/orders"
    client.create_producer(topic, schema=schema.AvroSchema(Item)).send(Item(id=1, item=HOSTILE))
    client.create_producer(topic, schema=schema.AvroSchema(Noted)).send(Noted(id=2, item="pen", note="ü"))
    client.create_producer(f"persistent://{namespace}/json", schema=schema.JsonSchema(Item)).send(Item(id=3, item="j"))
    client.create_producer(f"persistent://{namespace}/text", schema=schema.StringSchema()).send("héllo")
    p = page.page
    page.open(f"#/messages/persistent/{namespace}/orders/10")
    payloads = p.get_by_test_id("payload")
    assert wait_for(lambda: payloads.count() == 2, 10)
    assert [json.loads(text) for text in payloads.all_inner_texts()] == [
        {"id": 2, "item": "pen", "note": "ü"}, {"id": 1, "item": HOSTILE}]  # newest first, each its own version
    labels = p.locator(".payload-label").all_inner_texts()
    assert labels[0].endswith("as AVRO (schema version 1)") and labels[1].endswith("as AVRO (schema version 0)")
    p.get_by_label("Show payloads as").select_option("hex")
    assert payloads.first.inner_text().startswith("000000  02 04 02 06 70 65 6e")  # union branch 1, zigzag 2, "pen"
    page.open(f"#/messages/persistent/{namespace}/json/10")
    assert wait_for(lambda: payloads.count() == 1, 10)
    assert json.loads(payloads.first.inner_text()) == {"id": 3, "item": "j"}
    page.open(f"#/messages/persistent/{namespace}/text/10")
    assert wait_for(lambda: payloads.count() == 1 and payloads.first.inner_text() == "héllo", 10)
    assert p.locator("main img, main script").count() == 0


def test_the_browser_reads_from_an_index_or_a_broker_time(page, broker, api):
    module, make = api
    topic = f"persistent://public/default/timeline-{module.__name__.split('.')[0]}"
    producer = make(broker.url).create_producer(topic, batching_enabled=False)
    sent = [producer.send(b"m%d" % n) for n in range(6)]
    path = topic.replace("://", "/")
    fourth = http("GET", f"{broker.admin_url}/admin/v2/{path}/ledger/{sent[4].ledger_id()}/entry/{sent[4].entry_id()}")
    broker_time = fourth[1]["X-Pulsar-Broker-Entry-METADATA-timestamp"]
    p = page.page
    page.open(f"#/messages/{path}/10")
    payloads = p.get_by_test_id("payload")
    assert wait_for(lambda: payloads.count() == 6, 10)
    p.get_by_label("From").select_option("index:")
    p.get_by_label("At", exact=True).fill("2")
    p.get_by_role("button", name="Show").click()
    p.wait_for_url(f"**/{quote(path.rsplit('/', 1)[1])}/10//index%3A2")
    assert wait_for(lambda: payloads.all_inner_texts() == ["m2", "m3", "m4", "m5"], 10)  # oldest first
    p.get_by_label("From").select_option("time:")
    p.get_by_label("At", exact=True).fill(broker_time)
    p.get_by_role("button", name="Show").click()
    assert wait_for(lambda: payloads.all_inner_texts()[:1] == ["m4"], 10)  # m4, and m5 unless stored the same ms
    assert payloads.all_inner_texts()[-1] == "m5"
    p.get_by_label("From").select_option("index:")
    p.get_by_label("At", exact=True).fill("two")
    p.get_by_role("button", name="Show").click()
    assert p.locator(".messages").inner_text() == "an index is a whole number"
    page.open(f"#/messages/{path}/10//index:99")  # past the end: nothing, no error
    assert wait_for(lambda: p.locator(".messages").inner_text() == "no messages", 10)
