"""The topic page's produce form in a real browser against a real standalone: a message
published through it (behind a confirmation) is seen in the message browser with its key
and properties, a hostile payload as text; on a schema'd topic the editor is prefilled
from the schema's fields and what the client reads decodes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from admin_http import http
from console_pages import Watched, checked_page, fact, started_broker
from polling import wait_for
from pulsar.schema import AvroSchema, Integer, Record, String
from standalone import Standalone

HOSTILE = "<img src=x onerror=window.__xss=7>"
ADMIN = "/admin/v2/persistent/public/default"


class Order(Record):
    id = Integer()
    item = String()


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    yield from started_broker(tmp_path_factory, "produce")


@pytest.fixture
def page(browser, broker) -> Iterator[Watched]:
    yield from checked_page(browser, broker)


def publish(page: Watched, confirm: bool = True) -> str:
    """Clicks Publish…, answering its confirmation; the outcome once it is shown."""
    outcome = page.page.get_by_test_id("produce-outcome")
    before = outcome.inner_text()
    page.answers = [confirm]
    page.page.get_by_role("button", name="Publish…").click()
    if confirm:
        assert wait_for(lambda: outcome.inner_text() not in ("", before), 10)
    return outcome.inner_text()


def stored(broker, topic: str) -> int:
    return json.loads(http("GET", f"{broker.admin_url}{ADMIN}/{topic}/stats")[2])["msgInCounter"]


def test_a_message_published_from_the_form_is_in_the_browser(page, broker):
    assert http("PUT", f"{broker.admin_url}{ADMIN}/formed")[0] == 204
    p = page.page
    page.open("#/topic/persistent/public/default/formed")
    p.get_by_test_id("produce-schema").filter(has_text="No schema").wait_for()
    p.get_by_label("Message key").fill(HOSTILE)
    p.get_by_label("Message properties").fill(f"color=red\nnote={HOSTILE}")
    p.get_by_label("Message payload").fill(HOSTILE)
    assert publish(page, confirm=False) == ""  # dismissed: nothing sent
    assert page.dialogs[-1] == "Publish this message to persistent://public/default/formed?"
    assert publish(page).startswith("published as ")
    p.get_by_label("Message properties").fill("no equals sign")
    assert publish(page) == 'refused: a property is name=value, not "no equals sign"'
    assert stored(broker, "formed") == 1
    page.open("#/messages/persistent/public/default/formed/10")
    card = p.get_by_test_id("message")
    assert wait_for(lambda: card.count() == 1, 10)
    assert card.get_by_test_id("payload").inner_text() == HOSTILE
    assert fact(p, "Key") == HOSTILE
    rows = card.locator("tbody tr").all_inner_texts()
    assert sorted(rows) == sorted(["color\tred", f"note\t{HOSTILE}"])
    assert p.locator("main img, main script").count() == 0


def test_the_editor_follows_the_topics_schema(page, broker, client_factory):
    consumer = client_factory(broker.url).subscribe("persistent://public/default/ordered", "s",
                                                    schema=AvroSchema(Order))
    p = page.page
    page.open("#/topic/persistent/public/default/ordered")
    p.get_by_test_id("produce-schema").filter(has_text="Schema AVRO").wait_for()
    editor = p.get_by_label("Message payload")
    assert json.loads(editor.input_value()) == {"id": 0, "item": ""}
    editor.fill(json.dumps({"id": "five", "item": "book"}))  # not an int: the broker refuses it
    assert publish(page).startswith("refused: 400: messages[0]: payload does not fit the topic's AVRO schema")
    editor.fill("{not json")
    assert publish(page).startswith("refused: ")
    editor.fill(json.dumps({"id": 5, "item": HOSTILE}))
    assert publish(page).startswith("published as ")
    got = consumer.receive(timeout_millis=10_000).value()
    assert (got.id, got.item) == (5, HOSTILE)
