"""The console's functions views and the overview's warnings in a real browser against a
real standalone: a stateful function fed by the official client and a Kafka client, its
instances, rates, state looked up by key, stop/start/restart behind a confirmation; a raising
function's exceptions, holding a hostile payload, shown as text; a backlog near its quota and
a disk nearly full (a real small file system) warned of."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from confluent_kafka import Producer
from console_pages import Watched, checked_page, fact, row_of, started_broker
from polling import wait_for
from small_disk import MountUnavailable, fill, mount_small_disk
from standalone import Standalone

sys.path.insert(0, str(Path(__file__).parents[1] / "functions"))
from fn_helpers import deploy, functions_admin, status

HOSTILE = "bad <img src=x onerror=window.__xss=9><script>alert(9)</script>"
KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    yield from started_broker(tmp_path_factory, "functions", ["--kafka", "0"])


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
    yield from checked_page(browser, broker)


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


def test_the_overview_warns_of_a_backlog_near_its_quota_and_a_failing_function(page, broker, api):
    module, make = api
    topic = f"persistent://public/default/filling-{module.__name__.split('.')[0]}"
    client = make(broker.url)
    client.subscribe(topic, "slow").close()
    url = f"{broker.admin_url}/admin/v2/{topic.replace('://', '/')}"
    assert http("POST", f"{url}/backlogQuota?backlogQuotaType=destination_storage",
                b'{"limitSize": 20000, "limitTime": -1, "policy": "producer_exception"}')[0] == 204
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(9):
        producer.send(b"x" * 2000)  # 18,000 of 20,000 bytes: 90 %
    p = page.page
    page.open()
    warned = p.get_by_test_id("warnings")
    assert wait_for(lambda: any(line.startswith(f"Topic {topic}: backlog ") for line in warned.all_inner_texts()
                                for line in line.splitlines()), 15)
    lines = warned.inner_text().splitlines()
    assert re.search(rf"^Topic {re.escape(topic)}: backlog 1[78]\.\d KiB is (9\d) % of its quota \(19\.5 KiB\)\.$",
                     "\n".join(lines), re.MULTILINE), lines
    failing = [line for line in lines if line.startswith("Function public/default/raiser instance 0 is failing: ")]
    assert failing == [f"Function public/default/raiser instance 0 is failing: ValueError: cannot take {HOSTILE}"]
    assert fact(p, "Functions") == "2 of 2 instances (2 functions)"
    assert p.locator("main img, main script").count() == 0


def test_the_overview_warns_of_a_disk_nearly_full(browser, tmp_path):
    try:
        with mount_small_disk(tmp_path) as disk:
            broker = Standalone(disk / "data", log_dir=tmp_path).start()
            try:
                page = Watched(browser, broker.admin_url)
                page.open()
                p = page.page
                p.locator("dl.facts").wait_for()
                assert wait_for(lambda: p.get_by_text("none", exact=True).count() == 1, 15)  # no warnings yet
                fill(disk)
                warned = p.get_by_test_id("warnings")
                assert wait_for(lambda: warned.count() == 1 and
                                warned.inner_text().startswith("The disk holding the data is nearly full: "), 15)
                assert re.match(r"\d+(\.\d)? [KM]?i?B free of 2\d\.\d MiB", fact(p, "Disk")), fact(p, "Disk")
                assert page.errors == []
                page.close()
            finally:
                broker.stop()
    except MountUnavailable as exc:
        pytest.skip(f"no small file system can be mounted here (needs root or CAP_SYS_ADMIN): {exc}")
