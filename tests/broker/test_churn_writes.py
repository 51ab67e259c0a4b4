"""Subscriptions and topics created while the event loop goes on (issue 45).

A new subscription's cursor and a new topic's managed ledger are written off the event
loop, and the SUBSCRIBE or PRODUCER is answered once they are durable: a SIGKILL right
after the answers keeps every one of them, and one the disk had no room for is refused
with nothing of it left behind, and made once there is room. Both clients.
"""

from __future__ import annotations

import contextlib
import random

import pytest
from admin_http import get_json, http
from polling import wait_for
from standalone import Standalone

from magnetar.storage.faults import ENV_VAR

NS = "persistent://public/default"


def admin(broker: Standalone, path: str):
    return get_json(f"{broker.admin_url}/admin/v2/persistent/public/default{path}")


def test_what_was_answered_survives_a_sigkill_right_after(broker_factory, api):
    module, make = api
    broker = broker_factory()
    client = make(broker.url)
    rng = random.Random()
    topics = [f"new-{i}" for i in range(rng.randint(10, 20))]
    producers = [client.create_producer(f"{NS}/{topic}") for topic in topics]
    producers[-1].send(b"kept")
    shared = [client.subscribe(f"{NS}/subs", "shared", consumer_type=module.ConsumerType.Shared)
              for _ in range(3)]  # the first makes it, the others join it
    names = [f"sub-{i}" for i in range(rng.randint(20, 40))]
    consumers = [client.subscribe(f"{NS}/subs", name, initial_position=module.InitialPosition.Earliest)
                 for name in names]
    broker.kill()  # no clean stop: only what was durable when answered is there
    with contextlib.suppress(Exception):
        client.close()
    del consumers, shared, producers
    broker.restart()
    assert sorted(admin(broker, "/subs/subscriptions")) == sorted([*names, "shared"])
    assert {f"{NS}/{topic}" for topic in topics} <= set(admin(broker, ""))
    reader = make(broker.url).subscribe(f"{NS}/{topics[-1]}", "check",
                                        initial_position=module.InitialPosition.Earliest)
    assert reader.receive(timeout_millis=10_000).data() == b"kept"


@pytest.fixture
def full_switch_broker(tmp_path):
    switch = tmp_path / "disk-full"
    broker = Standalone(tmp_path / "data", [], env={ENV_VAR: str(switch)}).start()
    yield broker, switch
    with contextlib.suppress(Exception):
        broker.stop()


def test_a_subscription_or_topic_the_disk_had_no_room_for_leaves_nothing_and_is_made_later(full_switch_broker, api):
    module, make = api
    broker, switch = full_switch_broker
    client = make(broker.url)
    producer = client.create_producer(f"{NS}/existing")  # the topic is there before the disk fills
    client.subscribe(f"{NS}/existing", "before").close()  # and the broker's once-only records
    switch.touch()
    for _ in range(2):  # asked again while still full: refused again, not stuck
        with pytest.raises(module.NotAllowedError):
            client.subscribe(f"{NS}/existing", "while-full")
        with pytest.raises(module.ProducerBlockedQuotaExceededError):
            client.create_producer(f"{NS}/born-while-full")
    assert admin(broker, "/existing/subscriptions") == ["before"]  # no half-made subscription in memory
    assert f"{NS}/born-while-full" not in admin(broker, "")
    switch.unlink()
    assert wait_for(lambda: http("GET", f"{broker.admin_url}/admin/v2/brokers/health")[0] == 200)
    consumer = client.subscribe(f"{NS}/existing", "while-full")
    late = client.create_producer(f"{NS}/born-while-full")
    producer.send(b"after")
    late.send(b"late")
    assert consumer.receive(timeout_millis=10_000).data() == b"after"
    assert sorted(admin(broker, "/existing/subscriptions")) == ["before", "while-full"]
    status, _, _ = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default/born-while-full/stats")
    assert status == 200
    client.close()
    broker.stop()
    broker.restart()
    assert sorted(admin(broker, "/existing/subscriptions")) == ["before", "while-full"]
    assert f"{NS}/born-while-full" in admin(broker, "")
    assert "Traceback" not in broker.log()
