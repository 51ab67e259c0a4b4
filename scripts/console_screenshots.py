"""Take docs/console.md's screenshots of the web console: a fresh standalone with a little
traffic (orders produced in batches, a subscription with a backlog), each view opened in
Debian's headless Chromium at 1280x800 and saved as docs/console_<view>.png.

Usage:
    .venv/bin/python scripts/console_screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "console"))
from console_pages import chromium
from standalone import Standalone

ROOT = Path(__file__).resolve().parents[1]

TOPIC = "persistent://public/default/orders"
VIEWS = {  # name -> (address, what to wait for)
    "overview": ("#/", "svg.chart"),
    "topic": ("#/topic/persistent/public/default/orders", "h2:text-is('Subscriptions')"),
    "messages": ("#/messages/persistent/public/default/orders/3/audit", "[data-testid=message]"),
}


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
    finally:
        client.close()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="console-shots-") as tmp:
        broker = Standalone(Path(tmp) / "data").start()
        try:
            traffic(broker.url)
            with chromium() as browser:
                context = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="light")
                page = context.new_page()
                for name, (address, ready) in VIEWS.items():
                    page.goto(f"{broker.admin_url}/{address}")
                    page.locator(ready).first.wait_for()
                    page.screenshot(path=ROOT / "docs" / f"console_{name}.png")
                    print(f"docs/console_{name}.png")
                context.close()
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
