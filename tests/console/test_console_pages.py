"""The web console in a real browser (headless Chromium, console_pages.py) against a real
standalone with traffic from the official client and a Kafka client: each view clicked
through and checked against what the admin API answers; hostile topic names, payloads,
keys and properties shown as text, with no script of theirs run."""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Iterator
from http.client import HTTPConnection

import jwt
import pulsar
import pytest
from admin_http import get_json
from confluent_kafka import Consumer, Producer
from console_pages import Watched, fact, row_of, started_broker
from polling import wait_for
from standalone import Standalone

ORDERS = "persistent://public/default/orders"
KAFKA_TOPIC = "kafka-orders"
#: Set as the page's window.__xss, or an alert, by any of them that ran as script.
HOSTILE_TOPIC = "<img src=x onerror=window.__xss=1>"
HOSTILE_PAYLOAD = "<script>window.__xss=2</script><img src=x onerror=alert(2)>"
HOSTILE_KEY = "<b onmouseover=alert(3)>key</b>"
HOSTILE_PROPERTY = ("<img src=x onerror=window.__xss=4>", "<script>alert(5)</script>")
#: A property value may be anything but a line break in the admin API's headers; a name that is
#: not an HTTP token (spaces, `<`) is dropped by the browser from an unbatched message's headers.
HOSTILE_VALUE = ("note", "<img src=x onerror=window.__xss=5> & <script>alert(6)</script>")
KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
MAX_ROWS = 500  # views.js' MAX_ROWS


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    yield from started_broker(tmp_path_factory, "console", ["--kafka", "0"])


@pytest.fixture(scope="module")
def traffic(broker) -> dict[str, object]:
    """What was sent: a batched topic with a subscription holding a backlog, one hostile
    topic written unbatched and batched, and a Kafka topic with a consumer group."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.subscribe(ORDERS, "audit").close()
        # batches of 8 (the Python client's default is no batching): entries of 8, 8 and 4 messages
        producer = client.create_producer(ORDERS, batching_enabled=True, batching_max_messages=8,
                                          batching_max_publish_delay_ms=60_000)
        orders = [f"order {n} ü" for n in range(20)]
        for n, text in enumerate(orders):
            producer.send_async(text.encode(), None, partition_key=f"customer-{n % 3}",
                                properties={"origin": "shop"}, event_timestamp=1_700_000_000_000 + n)
        producer.flush()
        hostile = f"persistent://public/default/{HOSTILE_TOPIC}"
        for batching in (False, True):
            writer = client.create_producer(hostile, batching_enabled=batching, batching_max_publish_delay_ms=1)
            writer.send(HOSTILE_PAYLOAD.encode(), properties=dict([HOSTILE_PROPERTY, HOSTILE_VALUE]),
                        partition_key=HOSTILE_KEY)
            writer.close()
    finally:
        client.close()
    bootstrap = f"127.0.0.1:{KAFKA_READY.findall(broker.log())[-1]}"
    kafka = Producer({"bootstrap.servers": bootstrap})
    for n in range(3):
        kafka.produce(KAFKA_TOPIC, f"kafka {n}".encode(), key=b"k")
    assert kafka.flush(15) == 0
    group = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
    try:
        group.subscribe([KAFKA_TOPIC])
        assert wait_for(lambda: (record := group.poll(0.5)) is not None and record.error() is None, 30)
        group.commit(asynchronous=False)  # the group's offset: one read, the rest its backlog
    finally:
        group.close()
    return {"orders": orders}


@pytest.fixture
def page(browser, broker, traffic) -> Iterator[Watched]:
    watched = Watched(browser, broker.admin_url)
    yield watched
    assert watched.dialogs == [] and watched.errors == [] and watched.xss() is None
    watched.close()


def size_text(size: int) -> str:
    """A size as the console writes it (dom.js' bytes)."""
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KiB"


def stats(broker, topic: str) -> dict:
    return get_json(f"{broker.admin_url}/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")


def test_overview_counts_match_the_admin_api(page, broker):
    page.open()
    tenants = get_json(f"{broker.admin_url}/admin/v2/tenants")
    namespaces = [ns for tenant in tenants for ns in get_json(f"{broker.admin_url}/admin/v2/namespaces/{tenant}")]
    topics = [t for ns in namespaces for t in get_json(f"{broker.admin_url}/admin/v2/namespaces/{ns}/topics?mode=ALL")]
    p = page.page
    p.locator("dl.facts").wait_for()
    assert fact(p, "Version") == "magnetar-" + __import__("magnetar").__version__
    assert (fact(p, "Tenants"), fact(p, "Namespaces"), fact(p, "Topics")) == (
        str(len(tenants)), str(len(namespaces)), str(len(topics)))
    assert len(topics) >= 3  # orders, the hostile topic, the Kafka topic's partition
    # the ports bound, though the broker was asked for any free one (port 0)
    listeners = fact(p, "Listeners")
    assert f":{broker.port}" in listeners and f":{broker.admin_url.rsplit(':', 1)[1]}" in listeners, listeners
    # polled: the chart of rates gains a sample every few seconds, the rates from the counters between two
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer("persistent://public/default/live")
        for n in range(30):
            producer.send(b"live %d" % n)
    finally:
        client.close()
    chart = p.locator("div.chart").first
    assert wait_for(lambda: int(chart.get_attribute("data-samples")) >= 2, 15)
    assert chart.locator("canvas").bounding_box()["width"] > 100  # drawn by the vendored uPlot
    assert wait_for(lambda: p.get_by_test_id("rate-in").inner_text() != "in 0.0 msg/s", 15)


def test_click_through_to_a_topic_and_its_messages(page, broker, traffic):
    p = page.page
    page.open()
    p.get_by_role("link", name="Tenants", exact=True).first.click()
    p.get_by_role("link", name="public", exact=True).click()
    p.get_by_role("link", name="default", exact=True).click()
    p.get_by_placeholder("Search topics").fill("ORD")
    listed = p.get_by_test_id("list").locator("tbody tr")
    assert wait_for(lambda: listed.count() == 2, 10)  # orders and kafka-orders' partition, not the hostile one
    p.get_by_role("link", name="orders", exact=True).click()
    p.locator("h2:text-is('Subscriptions')").wait_for()
    assert re.search(r"#/topic/persistent/public/default/orders$", p.url)
    # the topic's rates over time: a chart that gains a sample a refresh, drawn from the second
    assert wait_for(lambda: int(p.locator("div.chart").first.get_attribute("data-samples")) >= 2, 30)
    assert p.locator("div.chart canvas").first.bounding_box()["width"] > 100
    expected = stats(broker, ORDERS)
    audit = row_of(p, "audit")
    assert audit[:3] == ["audit", "Exclusive", str(expected["subscriptions"]["audit"]["msgBacklog"])]
    assert expected["subscriptions"]["audit"]["msgBacklog"] >= 1
    assert fact(p, "Storage") == size_text(expected["storageSize"])

    p.get_by_role("link", name="Browse messages").click()
    p.get_by_label("How many").fill("100")
    p.get_by_role("button", name="Show").click()
    assert re.search(r"#/messages/persistent/public/default/orders/100/$", p.url)
    cards = p.get_by_test_id("message")
    assert wait_for(lambda: cards.count() == len(traffic["orders"]), 15)
    payloads = p.get_by_test_id("payload").all_inner_texts()
    assert payloads == list(reversed(traffic["orders"]))  # newest first, each batch split into its messages
    ids = [fact(card, "Message id") for card in cards.all()]
    assert [i.rsplit(":", 1)[1] for i in ids] == [*"3210", *"76543210", *"76543210"], ids
    newest = cards.first
    assert fact(newest, "Key") == "customer-1"  # order 19
    assert fact(newest, "Event time") == "2023-11-14T22:13:20.019Z"
    # PIP-70's index of each message, though the broker stores one per entry (its last message's)
    assert [fact(card, "Index") for card in cards.all()] == [str(n) for n in range(19, -1, -1)]
    assert row_of(newest, "origin") == ["origin", "shop"]

    # the subscription's backlog, bookmarked: the oldest unacknowledged message first
    p.get_by_label("From").select_option("sub:audit")
    p.get_by_role("button", name="Show").click()
    assert wait_for(lambda: p.url.endswith("/100/audit") and cards.count() == len(traffic["orders"]), 15)
    assert p.get_by_test_id("payload").first.inner_text() == "order 0 ü"
    p.get_by_label("Show payloads as").select_option("hex")
    assert p.get_by_test_id("payload").first.inner_text().startswith("000000  6f 72 64 65 72 20 30")


def test_a_kafka_group_is_a_subscription_of_its_topic(page, broker):
    p = page.page
    page.open("#/namespace/public/default")
    p.get_by_placeholder("Search topics").fill(KAFKA_TOPIC)
    link = p.get_by_role("link", name=re.compile(f"^{KAFKA_TOPIC}"))
    name = link.inner_text()
    link.click()
    p.locator("h2:text-is('Subscriptions')").wait_for()
    backlog = stats(broker, f"public/default/{name}")["subscriptions"]["billing"]["msgBacklog"]
    assert row_of(p, "billing")[2] == str(backlog)
    # the partitioned topic Kafka made: its partitions, each a link
    page.open(f"#/topic/persistent/public/default/{KAFKA_TOPIC}")
    p.locator("h2:text-is('Partitions')").wait_for()
    partitions = get_json(f"{broker.admin_url}/admin/v2/persistent/public/default/{KAFKA_TOPIC}/partitions")
    assert fact(p, "Partitions") == str(partitions["partitions"])
    assert p.locator("tbody tr").first.inner_text() == name


def test_hostile_names_and_payloads_render_as_text(page, broker):
    p = page.page
    page.open("#/namespace/public/default")
    p.get_by_role("link", name=HOSTILE_TOPIC, exact=True).click()
    p.locator("h2:text-is('Subscriptions')").wait_for()
    assert p.locator("h1").inner_text() == f"Topic persistent://public/default/{HOSTILE_TOPIC}"
    p.get_by_role("link", name="Browse messages").click()
    cards = p.get_by_test_id("message")
    assert wait_for(lambda: cards.count() == 2, 15)  # one entry unbatched, one a batch of one
    for card in cards.all():
        assert card.get_by_test_id("payload").inner_text() == HOSTILE_PAYLOAD
        assert fact(card, "Key") == HOSTILE_KEY
        assert row_of(card, HOSTILE_VALUE[0]) == list(HOSTILE_VALUE)
    batched = next(card for card in cards.all() if fact(card, "Message id").count(":") == 2)
    assert row_of(batched, HOSTILE_PROPERTY[0]) == list(HOSTILE_PROPERTY), batched.inner_text()
    assert p.locator("main img, main script, main b").count() == 0


def test_the_page_forbids_inline_script(page):
    response = page.open()
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    ran = page.page.evaluate("""() => {
        const script = document.createElement("script");
        script.textContent = "window.__inline = 1";
        document.body.append(script);
        return window.__inline;
    }""")
    assert ran is None  # the browser enforced the policy
    page.errors.clear()  # the refusal it logged is the one this test provoked


def test_a_token_signed_in_is_sent_for_this_tab_only(browser, broker_factory, tmp_path):
    key = tmp_path / "secret.key"
    key.write_bytes(b"s" * 32)
    secured = broker_factory("authenticationEnabled=true", "authenticationProviders=token", "authorizationEnabled=true",
                             "superUserRoles=admin", f"tokenSecretKey=file://{key}")
    page = Watched(browser, secured.admin_url)
    p = page.page
    page.open()
    form = p.locator("#sign-in")
    form.wait_for()
    assert "asks for a token" in form.inner_text()
    p.get_by_label("Token").fill(jwt.encode({"sub": "someone"}, key.read_bytes(), algorithm="HS256")[:-2] + "xx")
    p.get_by_role("button", name="Sign in").click()
    assert wait_for(lambda: "Unable to authenticate" in form.inner_text(), 10)
    # a role that may not list tenants nor read the configuration: the overview says so, and
    # asks again neither (one refusal in the broker's log, whatever the refreshes)
    p.get_by_label("Token").fill(jwt.encode({"sub": "someone"}, key.read_bytes(), algorithm="HS256"))
    p.get_by_role("button", name="Sign in").click()
    p.locator("dl.facts").wait_for()
    assert fact(p, "Tenants") == fact(p, "Listeners") == "(needs a super user's token)"
    for _ in range(2):
        shown = p.locator("#status").inner_text()
        assert wait_for(lambda shown=shown: p.locator("#status").inner_text() != shown, 15)
    assert len(re.findall(r"GET /admin/v2/tenants from \S+: 403", secured.log())) == 1
    p.get_by_role("button", name="Sign out").click()
    form.wait_for()
    p.get_by_label("Token").fill(jwt.encode({"sub": "admin"}, key.read_bytes(), algorithm="HS256"))
    p.get_by_role("button", name="Sign in").click()
    p.locator("dl.facts").wait_for()
    assert wait_for(form.is_hidden, 10) and fact(p, "Tenants") == "2"
    page.open("#/tenants")  # a reload of the tab keeps it
    p.get_by_role("link", name="public", exact=True).wait_for()
    other = p.context.new_page()  # another tab of the same browser asks again
    other.goto(f"{secured.admin_url}/")
    other.locator("#sign-in").wait_for()
    other.close()
    p.get_by_role("button", name="Sign out").click()
    form.wait_for()
    assert p.evaluate("() => sessionStorage.length") == 0
    assert page.dialogs == [] and page.errors == []
    page.close()


def test_a_long_list_draws_its_first_rows_and_is_searched(page, broker):
    url = urllib.parse.urlsplit(broker.admin_url)
    connection = HTTPConnection(url.hostname, url.port, timeout=30)
    connection.request("PUT", "/admin/v2/namespaces/public/many")
    assert connection.getresponse().read() == b""
    for n in range(MAX_ROWS + 1):  # one keep-alive connection: 501 topics in a few seconds
        connection.request("PUT", f"/admin/v2/persistent/public/many/t{n:03d}")
        response = connection.getresponse()
        assert (response.status, response.read()) == (204, b"")
    connection.close()
    p = page.page
    page.open("#/namespace/public/many")
    p.get_by_test_id("more").wait_for()
    assert p.get_by_test_id("list").locator("tbody tr").count() == MAX_ROWS
    assert p.get_by_test_id("more").inner_text() == "1 more of 501: type in the search box to narrow them"
    p.get_by_placeholder("Search topics").fill("t500")
    assert wait_for(lambda: p.get_by_test_id("list").locator("tbody tr").all_inner_texts() == ["t500\tpersistent"], 10)
    assert p.get_by_test_id("more").count() == 0


def test_subscription_actions_ask_first_and_call_the_admin_api(page, broker):
    topic = "persistent://public/default/actions"
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.subscribe(topic, "ops").close()
        producer = client.create_producer(topic)
        for n in range(5):
            producer.send(b"m%d" % n)
    finally:
        client.close()

    def backlog() -> int:
        return stats(broker, topic)["subscriptions"]["ops"]["msgBacklog"]

    p = page.page
    page.open("#/topic/persistent/public/default/actions")
    clear = p.get_by_role("button", name="Clear backlog")
    clear.click()  # answered No
    assert page.dialogs == ["Acknowledge every message of subscription ops?"]
    page.answers = [True]
    clear.click()
    assert wait_for(lambda: backlog() == 0, 10)
    assert wait_for(lambda: row_of(p, "ops")[2] == "0", 10)
    page.answers = ["60", True]
    asked = time.time()
    p.get_by_role("button", name="Reset…").click()
    assert wait_for(lambda: backlog() == 5, 10)
    reset_to = int(re.findall(r"POST \S+/subscription/ops/resetcursor/(\d+) from", broker.log())[-1])
    assert abs(reset_to / 1000 - (asked - 3600)) < 30  # an hour before the click
    page.answers = ["2", True]
    p.get_by_role("button", name="Skip…").click()
    assert wait_for(lambda: backlog() == 3 and row_of(p, "ops")[2] == "3", 10)
    assert page.dialogs[1:] == [
        "Acknowledge every message of subscription ops?",
        "Reset subscription ops to how many minutes ago, or to a date (ISO 8601)?",
        "Move subscription ops back to what was published in the last 60 minutes?",
        "Skip how many messages of subscription ops?",
        "Acknowledge the next 2 messages of subscription ops?",
    ]
    page.answers = ["2026-01-02T03:04:05Z", True]  # an absolute date: before every message, so all 5 again
    p.get_by_role("button", name="Reset…").click()
    assert wait_for(lambda: backlog() == 5 and row_of(p, "ops")[2] == "5", 10)
    assert re.findall(r"POST \S+/subscription/ops/resetcursor/(\d+) from", broker.log())[-1] == "1767323045000"
    page.answers = ["next tuesday"]  # neither minutes nor a date: nothing asked further, nothing sent
    p.get_by_role("button", name="Reset…").click()
    assert page.dialogs[-2:] == ["Move subscription ops back to what was published since 2026-01-02T03:04:05.000Z?",
                                 "Reset subscription ops to how many minutes ago, or to a date (ISO 8601)?"]
    page.dialogs.clear()


def test_a_hidden_tab_stops_polling_and_catches_up_when_shown(page):
    p = page.page
    page.open()
    p.locator("dl.facts").wait_for()
    asked: list[str] = []
    p.on("request", lambda request: asked.append(request.url) if request.url.endswith("/metrics") else None)
    hide = """hidden => {
        Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
        document.dispatchEvent(new Event("visibilitychange"));
    }"""
    p.evaluate(hide, True)
    p.wait_for_timeout(7000)  # two refresh intervals: a window in which nothing may be asked
    assert asked == []
    with p.expect_request(lambda request: request.url.endswith("/metrics"), timeout=5000):
        p.evaluate(hide, False)  # shown: asked at once, not at the next interval
