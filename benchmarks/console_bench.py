"""What the web console costs: each view's time to first content in headless Chromium with
many topics in one namespace, and the broker's CPU while a console is left open.

The broker gets `--topics` topics in public/default (created over the admin API) and one
topic with a subscription holding a backlog. Each round opens every view in a fresh tab
(the views alternate within a round, so drift in the machine's speed falls on all) and
times `goto` to the view's first content: the overview's facts, the namespace's first topic
row, the topic's subscriptions, the message browser's first message (the latest, and from a
PIP-70 index), the namespace's and the topic's policies, the functions list; and a search in
the namespace's list (typing the last topic's name to its row alone shown). Then the broker's
CPU (from /proc, 10 ms ticks) is read over `--idle-seconds` with no page open, and as long
with the overview open, refreshing itself (every 3 s, or slower on a large broker: app.js'
SHARE): the console's cost is the difference, in percent of one core. Prints one JSON
object, with the load average before and after.

    .venv/bin/python benchmarks/console_bench.py --topics 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.parse
from http.client import HTTPConnection
from pathlib import Path

from _broker_process import cpu_seconds, official_client, start_standalone

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "console"))
from console_pages import chromium

BACKLOG_TOPIC = "persistent://public/default/backlog"
VIEWS = {  # view -> (address, selector of its first content)
    "overview": ("#/", "dl.facts"),
    "namespace_first_row": ("#/namespace/public/default", "[data-testid=list] tbody tr"),
    "topic": ("#/topic/persistent/public/default/backlog", "h2:text-is('Subscriptions')"),
    "messages": ("#/messages/persistent/public/default/backlog/10", "[data-testid=message]"),
    "messages_from_index": ("#/messages/persistent/public/default/backlog/10//index%3A50", "[data-testid=message]"),
    "namespace_policies": ("#/namespace/public/default", "[data-testid=policies] tbody tr"),
    "topic_schema_and_policies": ("#/topic/persistent/public/default/backlog", "[data-testid=policies] tbody tr"),
    "functions": ("#/functions", "[data-testid=list] table, [data-testid=list] p.empty"),
}


def create_topics(admin_url: str, count: int) -> float:
    """Seconds to create `count` topics over one keep-alive connection."""
    url = urllib.parse.urlsplit(admin_url)
    connection = HTTPConnection(url.hostname, url.port, timeout=30)
    started = time.perf_counter()
    for n in range(count):
        connection.request("PUT", f"/admin/v2/persistent/public/default/topic-{n:05d}")
        response = connection.getresponse()
        response.read()
        if response.status != 204:
            raise SystemExit(f"creating topic-{n:05d}: {response.status}")
    connection.close()
    return time.perf_counter() - started


def view_seconds(browser, base: str, address: str, selector: str) -> float:
    context = browser.new_context()
    page = context.new_page()
    try:
        started = time.perf_counter()
        page.goto(f"{base}/{address}")
        page.locator(selector).first.wait_for(timeout=120_000)
        return time.perf_counter() - started
    finally:
        context.close()


def search_seconds(browser, base: str, last: int) -> float:
    """From typing the last topic's name into the namespace's search box to its row alone shown."""
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"{base}/{VIEWS['namespace_first_row'][0]}")
        page.locator("[data-testid=list] tbody tr").first.wait_for(timeout=120_000)
        started = time.perf_counter()
        page.get_by_placeholder("Search topics").fill(f"topic-{last:05d}")
        page.wait_for_function("document.querySelectorAll('[data-testid=list] tbody tr').length === 1", timeout=120_000)
        return time.perf_counter() - started
    finally:
        context.close()


def broker_cpu_percent(pid: int, seconds: float) -> float:
    before, started = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)  # a measurement window, not a synchronisation
    return 100 * (cpu_seconds(pid) - before) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        broker = start_standalone(Path(tmp) / "data", [])
        try:
            create_s = create_topics(broker.admin_url, args.topics)
            client = official_client(broker.url)
            client.subscribe(BACKLOG_TOPIC, "audit").close()
            producer = client.create_producer(BACKLOG_TOPIC)
            for n in range(100):
                producer.send(f"message {n}".encode())
            client.close()
            topics = args.topics + 1
            times: dict[str, list[float]] = {name: [] for name in [*VIEWS, "namespace_search"]}
            with chromium() as browser:
                for _ in range(args.rounds):
                    for name, (address, selector) in VIEWS.items():
                        times[name].append(view_seconds(browser, broker.admin_url, address, selector))
                    times["namespace_search"].append(search_seconds(browser, broker.admin_url, args.topics - 1))
                pid = broker.proc.pid
                idle = broker_cpu_percent(pid, args.idle_seconds)
                context = browser.new_context()
                page = context.new_page()
                page.goto(f"{broker.admin_url}/#/")
                page.locator("dl.facts").wait_for(timeout=120_000)
                open_overview = broker_cpu_percent(pid, args.idle_seconds)
                context.close()
        finally:
            broker.stop()
    print(json.dumps({
        "topics": topics, "rounds": args.rounds, "create_topics_s": round(create_s, 2),
        "view_s": {name: {"median": round(sorted(values)[len(values) // 2], 3), "all": [round(v, 3) for v in values]}
                   for name, values in times.items()},
        "broker_cpu_percent": {"idle": round(idle, 2), "overview_open": round(open_overview, 2),
                               "console_cost": round(open_overview - idle, 2)},
        "idle_seconds": args.idle_seconds, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
