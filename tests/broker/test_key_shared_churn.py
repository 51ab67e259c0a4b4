"""Key_Shared under churn: two to four consumers joining and leaving while a producer
publishes, every ack habit (at once, later, much later, negative), both batching types,
and a broker restart halfway. See traffic.py for how the run is driven and
traffic_judge.py for what is asserted."""

from __future__ import annotations

import random

import pulsar
import pytest
from traffic import Run, Scenario, draw_actions, seeds
from traffic_judge import STALL_LIMIT_S, judge, report


def scenario(seed: int, batching: str) -> Scenario:
    rng = random.Random(seed)
    consumers = rng.randint(2, 4)
    return Scenario(seed=seed, sub_type=pulsar.ConsumerType.KeyShared, batching=batching, partitions=0,
                    messages=rng.choice([2000, 3000, 4000]), keys=rng.choice([10, 20, 50]), consumers=consumers,
                    actions=draw_actions(rng, consumers, "restart", steps=rng.randint(2, 4)), ordered=True)


@pytest.mark.parametrize("batching", ["key_based", "default"])
@pytest.mark.parametrize("seed", seeds([5, 17]))
def test_key_shared_under_churn_and_restart(broker, batching, seed):
    sc = scenario(seed, batching)
    timeline, waits = Run(broker, sc).execute()
    verdict = judge(timeline, waits, ordered=True)
    print(f"{sc}: longest stall {verdict.longest_stall:.2f} s, {len(timeline.events)} events")
    assert not verdict.problems and verdict.longest_stall <= STALL_LIMIT_S, report(verdict, sc, timeline)
