"""Issue 41 item 1: a group consumer that starts before its producer receives every record, with every client.

While a partition's first batches were being stored, its high watermark counted their messages
(numbered, not yet durable) and its log start fell back to that: a Fetch at 0 got
OFFSET_OUT_OF_RANGE, the client reset to the earliest offset and was told the end, and whole
partitions were skipped. Each test races a consumer and a producer of one client on fresh
multi-partition topics, several at once, the producer's head start drawn at random.
"""

from __future__ import annotations

import random
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from racing_clients import CLIENTS
from seeds import fresh_seed

PARTITIONS = 3
RECORDS = 150
RACES, ROUNDS = 3, 2
"""Races run at once, each on its own topic, group and head start; rounds of them one after another."""
TIMEOUT = 30.0


def _empty_topics(bootstrap: str, count: int) -> list[str]:
    names = [f"race-{uuid.uuid4().hex[:10]}" for _ in range(count)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS) for name in names]).values():
        future.result(30)
    return names


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_consumer_started_before_the_producer_receives_every_record(kafka_broker, client) -> None:
    seed = fresh_seed()
    rng = random.Random(f"{seed}-{client}")
    race = CLIENTS[client]
    for _ in range(ROUNDS):
        topics = _empty_topics(kafka_broker.bootstrap, RACES)
        delays = [rng.uniform(0.0, 1.5) for _ in topics]
        with ThreadPoolExecutor(RACES) as pool:
            received = list(pool.map(lambda topic, delay: race(kafka_broker.bootstrap, topic, f"g-{topic}", RECORDS,
                                                               delay, TIMEOUT), topics, delays))
        assert received == [RECORDS] * RACES, (f"{client} received {received} of {RECORDS} (producer head starts "
                                               f"{[round(d, 2) for d in delays]} s, MAGNETAR_RUN_SEED={seed})")
