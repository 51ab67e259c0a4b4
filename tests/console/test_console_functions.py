"""The console's functions views in a real browser against a real standalone: a stateful
function fed by the official client and a Kafka client, its instances, rates, state looked
up by key, stop/start/restart behind a confirmation; a raising function's exceptions, holding
a hostile payload, shown as text."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from confluent_kafka import Producer
from console_pages import Watched, fact, row_of
from polling import wait_for
from standalone import Standalone

sys.path.insert(0, str(Path(__file__).parents[1] / "functions"))
from fn_helpers import deploy, functions_admin, status

HOSTILE = "bad <img src=x onerror=window.__xss=9><script>alert(9)</script>"
KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("functions") / "data", args=["--kafka", "0"]).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def functions(broker) -> dict[str, dict]:
    admin = functions_admin(broker.admin_url)
    counted = deploy(admin, "word-count", "word_count.py", "word_count.WordCountFunction",
                     inputs=["persistent://public/default/sentences"])
    raising = deploy(admin, "raiser", "raising.py", "raising.Raising", inputs=["persistent://public/default/risky"])
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.create_producer("persistent://public/default/sentences").send(b"a b a")
        client.create_producer("persistent://public/default/risky").send(HOSTILE.encode())
    finally:
        client.close()
    kafka = Producer({"bootstrap.servers": f"127.0.0.1:{KAFKA_READY.findall(broker.log())[-1]}"})
    kafka.produce("sentences", b"a c")  # the same topic, public/default's
    assert kafka.flush(15) == 0
    assert wait_for(lambda: status(admin, "word-count")["instances"][0]["status"]["numReceived"] == 2, 30)
    return {"word-count": counted, "raiser": raising}


@pytest.fixture
def page(browser, broker, functions) -> Iterator[Watched]:
    watched = Watched(browser, broker.admin_url)
    yield watched
    assert watched.errors == [] and watched.xss() is None
    watched.close()


def test_the_list_and_a_function_with_its_state(page, broker):
    p = page.page
    page.open()
    p.get_by_role("link", name="Functions", exact=True).click()
    p.get_by_role("link", name="word-count", exact=True).wait_for()
    assert row_of(p, "word-count")[1:4] == ["public/default", "1 of 1", "2"]
    assert row_of(p, "raiser")[2] == "1 of 1"
    p.get_by_role("link", name="word-count", exact=True).click()
    p.locator("h2:text-is('Instances')").wait_for()
    assert fact(p, "Running") == "1 of 1 instances"
    assert fact(p, "Inputs") == "persistent://public/default/sentences"
    instance = row_of(p, "0")
    assert (instance[1], instance[3], instance[4]) == ("running", "2", "2")  # received, processed
    assert wait_for(lambda: row_of(p, "0")[2] == "0.0 msg/s", 15)  # a rate once two refreshes have counted
    p.get_by_label("State key").fill("a")
    p.get_by_role("button", name="Look up").click()
    assert wait_for(lambda: '"numberValue": 3' in p.get_by_test_id("state").inner_text(), 10)  # 2 + 1 from Kafka
    p.get_by_label("State key").fill("<none>")
    p.get_by_role("button", name="Look up").click()
    assert wait_for(lambda: p.get_by_test_id("state").inner_text() == "no state under <none>", 10)


def test_stop_start_and_restart_ask_first(page, broker):
    admin = functions_admin(broker.admin_url)
    p = page.page
    page.open("#/function/public/default/word-count")
    p.locator("h2:text-is('Instances')").wait_for()
    actions = p.locator("p.actions")
    actions.get_by_role("button", name="Stop").click()  # answered No
    assert status(admin, "word-count")["numRunning"] == 1
    page.answers = [True]
    actions.get_by_role("button", name="Stop").click()
    assert wait_for(lambda: row_of(p, "0")[1].startswith("stopped") and status(admin, "word-count")["numRunning"] == 0,
                    15)
    page.answers = [True]
    actions.get_by_role("button", name="Start", exact=True).click()
    assert wait_for(lambda: row_of(p, "0")[1] == "running" and status(admin, "word-count")["numRunning"] == 1, 30)
    page.answers = [True]
    p.locator("tbody tr").first.get_by_role("button", name="Restart").click()
    outcome = p.get_by_test_id("function-outcome")
    assert wait_for(lambda: outcome.inner_text() == "Restart: done", 30)
    # the stop answered No was never sent
    assert len(re.findall(r"POST /admin/v3/functions/public/default/word-count/stop ", broker.log())) == 1
    assert page.dialogs == ["Stop every instance of function word-count?"] * 2 + [
        "Start every instance of function word-count?", "Restart instance 0 of function word-count?"]


def test_exceptions_are_shown_as_text(page):
    p = page.page
    page.open("#/function/public/default/raiser")
    p.locator("h2:text-is('Latest exceptions')").wait_for()
    shown = p.locator("pre.payload").first
    assert wait_for(lambda: shown.inner_text() == f"ValueError: cannot take {HOSTILE}", 15)
    assert p.locator("main img, main script").count() == 0
