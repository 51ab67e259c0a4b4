"""The group coordinator's state machine, driven directly: every generation's join, sync and errors."""

from __future__ import annotations

import asyncio
import random

import pytest
from kio.schema.errors import ErrorCode

from magnetar.kafka.groups import Group, GroupError, GroupState, Joiner

JOINER = Joiner("client", "host", session_timeout=30.0, rebalance_timeout=5.0)
RANGE = [("range", b"meta")]


async def _generation(group: Group, member_ids: list[str]) -> dict[str, object]:
    """Everyone (re)joins, the leader assigns each member its own id, everyone syncs.

    New members ("") ask first: a known member's rejoin would otherwise complete a generation
    of the known members alone (every one of them has rejoined), as Kafka's coordinator does."""
    ordered = [m for m in member_ids if not m] + [m for m in member_ids if m]
    joins = [group.join(member_id, JOINER, "consumer", RANGE) for member_id in ordered]
    results = await asyncio.gather(*joins)
    leaders = {r.leader for r in results}
    assert len(leaders) == 1 and all(r.error == ErrorCode.none for r in results)
    (leader,) = leaders
    assert {r.generation for r in results} == {group.generation}
    assert [bool(r.members) for r in results] == [r.member_id == leader for r in results]
    assignments = {r.member_id: r.member_id.encode() for r in results}
    syncs = [group.sync(r.member_id, r.generation, assignments if r.member_id == leader else {}) for r in results]
    synced = await asyncio.gather(*syncs)
    assert synced == [(ErrorCode.none, r.member_id.encode()) for r in results]
    assert group.state is GroupState.STABLE
    return {r.member_id: r for r in results}


def test_random_joins_and_leaves_keep_one_leader_and_each_members_assignment() -> None:
    async def run() -> None:
        rng = random.Random()
        group = Group("g")
        members: list[str] = []
        for _ in range(rng.randint(5, 12)):
            generation = group.generation
            if members and rng.random() < 0.4:
                gone = members.pop(rng.randrange(len(members)))
                assert group.leave(gone) == ErrorCode.none
                if not members:
                    assert group.state is GroupState.EMPTY
                    continue
                assert group.heartbeat(members[0], generation) == ErrorCode.rebalance_in_progress
            joined = await _generation(group, [*members, ""])
            members = list(joined)
            assert group.generation > generation
            with pytest.raises(GroupError) as stale:
                group.heartbeat(members[0], generation)
            assert stale.value.code == ErrorCode.illegal_generation
            assert all(group.heartbeat(m, group.generation) == ErrorCode.none for m in members)

    asyncio.run(run())


def test_a_rejoin_waits_for_every_member_and_a_straggler_is_dropped_at_the_rebalance_timeout() -> None:
    async def run() -> None:
        group = Group("g")
        quick = Joiner("c", "h", session_timeout=30.0, rebalance_timeout=0.05)
        first = await group.join("", quick, "consumer", RANGE)
        other = group.join("", quick, "consumer", RANGE)  # a second member: a new generation, first must rejoin
        assert not other.done()
        result = await other  # first never rejoins: dropped when the rebalance times out
        assert result.error == ErrorCode.none and result.leader == result.member_id
        assert list(group.members) == [result.member_id] and first.member_id not in group.members

    asyncio.run(run())


@pytest.mark.parametrize(("call", "code"), [
    (lambda g: g.heartbeat("nobody", g.generation), ErrorCode.unknown_member_id),
    (lambda g: g.join("nobody", JOINER, "consumer", RANGE), ErrorCode.unknown_member_id),
    (lambda g: g.join("", JOINER, "connect", RANGE), ErrorCode.inconsistent_group_protocol),
    (lambda g: g.join("", JOINER, "consumer", [("roundrobin", b"")]), ErrorCode.inconsistent_group_protocol),
    (lambda g: g.sync(next(iter(g.members)), g.generation + 1, {}), ErrorCode.illegal_generation),
    (lambda g: g.check_commit("nobody", 1), ErrorCode.unknown_member_id),
])
def test_requests_from_outside_the_generation_are_refused(call, code) -> None:
    async def run() -> None:
        group = Group("g")
        await _generation(group, [""])
        with pytest.raises(GroupError) as refused:
            call(group)
        assert refused.value.code == code
        group.check_commit("", -1)  # a consumer outside any group (assign()) may commit

    asyncio.run(run())


def test_a_member_whose_session_ran_out_is_removed_and_the_rest_rebalance() -> None:
    async def run() -> None:
        group = Group("g")
        members = list(await _generation(group, [*await _generation(group, [""]), ""]))
        group.members[members[0]].last_seen -= 60
        group.expire(asyncio.get_running_loop().time() and group.members[members[1]].last_seen + 1)
        assert list(group.members) == [members[1]] and group.state is GroupState.PREPARING_REBALANCE
        rejoined = await _generation(group, [members[1]])
        assert list(rejoined) == [members[1]]

    asyncio.run(run())
