"""Subscriptions and topics created while the event loop goes on (issue 45).

A new subscription's cursor and a new topic's managed ledger are written off the event
loop, and the SUBSCRIBE or PRODUCER is answered once they are durable: a SIGKILL right
after the answers keeps every one of them (one the disk had no room for:
test_full_disk.py). Both clients.
"""

from __future__ import annotations

import contextlib
import random

from admin_http import get_json
from standalone import Standalone

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
