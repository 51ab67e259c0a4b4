"""Shared and Key_Shared on a partitioned topic while the broker is killed (SIGKILL) partway:
several consumers with every ack habit, some joining only after the crash, some leaving.
At least once and no gaps for both; per-key order for Key_Shared; no stall outside the
restart window. See traffic.py for how the run is driven, traffic_judge.py for the rules."""

from __future__ import annotations

import random

import pulsar
import pytest
from traffic import Run, Scenario, draw_actions, seeds
from traffic_judge import STALL_LIMIT_S, judge, report

SUB_TYPES = {"shared": pulsar.ConsumerType.Shared, "key_shared": pulsar.ConsumerType.KeyShared}


def scenario(seed: int, sub_type: str) -> Scenario:
    rng = random.Random(seed)
    consumers = rng.randint(2, 3)
    actions = draw_actions(rng, consumers, "kill", steps=rng.randint(1, 3))
    late = tuple((rng.uniform(0.55, 0.9), "join") for _ in range(rng.randint(1, 2)))  # after the crash
    return Scenario(seed=seed, sub_type=SUB_TYPES[sub_type], batching=rng.choice(["default", "key_based"]),
                    partitions=rng.randint(2, 4), messages=rng.choice([2000, 3000]), keys=rng.choice([20, 50]),
                    consumers=consumers, actions=tuple(sorted(actions + late)), ordered=sub_type == "key_shared")


@pytest.mark.parametrize("sub_type", ["shared", "key_shared"])
@pytest.mark.parametrize("seed", seeds([3, 29]))
def test_partitioned_multi_consumer_survives_sigkill(broker, sub_type, seed):
    sc = scenario(seed, sub_type)
    timeline, waits = Run(broker, sc).execute()
    verdict = judge(timeline, waits, ordered=sc.ordered)
    print(f"{sc}: longest stall {verdict.longest_stall:.2f} s, {len(timeline.events)} events")
    assert not verdict.problems and verdict.longest_stall <= STALL_LIMIT_S, report(verdict, sc, timeline)
