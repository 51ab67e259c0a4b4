"""Take docs/console.md's screenshots of the web console: a fresh standalone with a little
traffic (orders produced in batches, a subscription with a backlog, an Avro topic with two
schema versions, a word-count function), each view opened in Debian's headless Chromium at
1280x800 in the light theme and saved as docs/console_<view>.png; then the overview and a
topic in the dark theme and at a phone's width (390x844), as docs/console_<view>_<variant>.png.

Usage:
    .venv/bin/python scripts/console_screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pulsar
from playwright.sync_api import Browser
from pulsar.schema import AvroSchema, Integer, Record, String

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "console"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "functions"))
from console_pages import chromium
from fn_helpers import deploy, functions_admin
from standalone import Standalone

ROOT = Path(__file__).resolve().parents[1]

TOPIC = "persistent://public/default/orders"
TYPED = "persistent://public/default/payments"
VIEWS = {  # name -> (address, what to wait for)
    "overview": ("#/", "div.chart canvas"),
    "namespace": ("#/namespace/public/default", "[data-testid=policies] tbody tr"),
    "topic": ("#/topic/persistent/public/default/orders", "h2:text-is('Subscriptions')"),
    "schema": ("#/topic/persistent/public/default/payments", "[data-testid=schema-diff]"),
    "messages": ("#/messages/persistent/public/default/orders/3/audit", "[data-testid=message]"),
    "decoded": ("#/messages/persistent/public/default/payments/2", "[data-testid=message]"),
    "functions": ("#/functions", "[data-testid=list] tbody tr"),
    "function": ("#/function/public/default/word-count", "h2:text-is('Instances')"),
}
VARIANTS = {  # suffix -> browser context options, for the views of VARIANT_VIEWS
    "dark": {"viewport": {"width": 1280, "height": 800}, "color_scheme": "dark"},
    "phone": {"viewport": {"width": 390, "height": 844}, "color_scheme": "light", "is_mobile": True},
}
VARIANT_VIEWS = ("overview", "topic")
SCROLLED = ("namespace", "schema")  # what they show is below the fold


class Payment(Record):
    id = Integer()
    amount = Integer()


class NotedPayment(Record):
    id = Integer()
    amount = Integer()
    note = String()


def traffic(url: str) -> None:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.subscribe(TOPIC, "audit").close()
        producer = client.create_producer(TOPIC, batching_enabled=True, batching_max_messages=4,
                                          batching_max_publish_delay_ms=60_000)
        for n in range(12):
            producer.send_async(f'{{"order": {n}, "item": "coffee"}}'.encode(), None, partition_key=f"customer-{n % 3}",
                                properties={"origin": "shop"})
        producer.flush()
        client.create_producer(TYPED, schema=AvroSchema(Payment)).send(Payment(id=1, amount=250))
        client.create_producer(TYPED, schema=AvroSchema(NotedPayment)).send(NotedPayment(id=2, amount=90, note="tip"))
        words = client.create_producer("persistent://public/default/sentences")
        for sentence in ("the quick brown fox", "the lazy dog"):
            words.send(sentence.encode())
    finally:
        client.close()


def shoot(browser: Browser, base: str, name: str, options: dict, suffix: str = "") -> None:
    context = browser.new_context(**options)
    page = context.new_page()
    address, ready = VIEWS[name]
    page.goto(f"{base}/{address}")
    page.locator(ready).first.wait_for()
    if name in SCROLLED:
        page.locator(ready).first.scroll_into_view_if_needed()
    shot = f"docs/console_{name}{suffix}.png"
    page.screenshot(path=ROOT / shot)
    print(shot)
    context.close()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="console-shots-") as tmp:
        broker = Standalone(Path(tmp) / "data", ["schemaCompatibilityStrategy=ALWAYS_COMPATIBLE"]).start()
        try:
            deploy(functions_admin(broker.admin_url), "word-count", "word_count.py", "word_count.WordCountFunction",
                   inputs=["persistent://public/default/sentences"])
            traffic(broker.url)
            with chromium() as browser:
                for name in VIEWS:
                    shoot(browser, broker.admin_url, name, {"viewport": {"width": 1280, "height": 800},
                                                            "color_scheme": "light"})
                for suffix, options in VARIANTS.items():
                    for name in VARIANT_VIEWS:
                        shoot(browser, broker.admin_url, name, options, f"_{suffix}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
