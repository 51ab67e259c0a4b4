"""The group state machine's edges, driven directly (issue 41's Tests: kafka/groups.py's mutation survivors).

Who gets which answer when: a superseded join, a sync pending when the generation ends, the
joins and syncs of a member removed while they wait, session expiry (never of a member waiting in
a join), the group emptying, the coordinator's expiry timer, and commits from inside and outside
a generation. Each answer is what Kafka's coordinator gives in the same spot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from kio.schema.errors import ErrorCode

from magnetar.kafka.groups import Group, GroupCoordinator, GroupError, GroupState, Joiner

SLOW = Joiner("app", "10.0.0.1", session_timeout=30.0, rebalance_timeout=30.0)
RANGE = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]


def run(test: Callable[[], Awaitable[None]]) -> None:
    """A generation that never completes fails in seconds rather than hanging (mutation runs time out slowly)."""
    asyncio.run(asyncio.wait_for(test(), 20))


async def _turn() -> None:
    await asyncio.sleep(0)


async def _stable(group: Group, count: int, joiner: Joiner = SLOW) -> list[str]:
    """`count` members joined (new ones one by one, each rejoin of the others awaited) and synced,
    oldest first. A newcomer asks before the others rejoin: a known member's rejoin alone would
    complete a generation of the known members."""
    members: list[str] = []
    for _ in range(count):
        pending = [group.join("", joiner, "consumer", RANGE)]
        pending += [group.join(m, joiner, "consumer", RANGE) for m in members]
        results = await asyncio.gather(*pending)
        members = [r.member_id for r in results[1:]] + [results[0].member_id]
        leader = results[0].leader
        syncs = [group.sync(m, group.generation, {x: x.encode() for x in members} if m == leader else {})
                 for m in members]
        await asyncio.gather(*syncs)
    assert group.state is GroupState.STABLE
    return members


def test_a_new_member_is_named_after_its_client_and_remembered_as_it_joined() -> None:
    async def test() -> None:
        group = Group("g")
        named = await group.join("", SLOW, "consumer", RANGE)
        anonymous = group.join("", Joiner("", "h", 1.0, 2.0), "consumer", [("range", b"")])
        await _turn()
        assert named.member_id.startswith("app-") and len(named.member_id) == len("app-") + 36
        member = group.members[named.member_id]
        assert (member.client_id, member.client_host, member.session_timeout, member.rebalance_timeout,
                member.protocols) == ("app", "10.0.0.1", 30.0, 30.0, RANGE)
        group.join(named.member_id, SLOW, "consumer", RANGE)  # the leader rejoins: the generation completes
        result = await anonymous
        assert result.member_id.startswith("member-")
        assert group.members[result.member_id].client_id == ""

    run(test)


def test_generations_count_by_one_and_the_join_answers_name_the_protocol_and_leader() -> None:
    async def test() -> None:
        group = Group("g")
        first = await group.join("", SLOW, "consumer", RANGE)
        assert (first.error, first.generation, first.protocol, first.leader) == (
            ErrorCode.none, 1, "range", first.member_id)
        assert first.members == [(first.member_id, b"r-meta")] and group.state is GroupState.COMPLETING_REBALANCE
        assert group.protocol == "range" and group.leader == first.member_id
        second = group.join("", SLOW, "consumer", [("roundrobin", b"x"), ("range", b"y")])
        await _turn()
        assert group.state is GroupState.PREPARING_REBALANCE and group.generation == 1
        again = await group.join(first.member_id, SLOW, "consumer", RANGE)
        follower = await second
        assert (again.generation, follower.generation, follower.leader, follower.members) == (
            2, 2, first.member_id, [])
        assert again.members == [(first.member_id, b"r-meta"), (follower.member_id, b"y")]

    run(test)


def test_a_join_sent_again_answers_the_first_one_unknown_member() -> None:
    async def test() -> None:
        group = Group("g")
        leader, other = await _stable(group, 2)
        waiting = group.join(other, SLOW, "consumer", RANGE)
        await _turn()
        resent = group.join(other, SLOW, "consumer", RANGE)
        assert (await waiting).error == ErrorCode.unknown_member_id and not resent.done()
        group.join(leader, SLOW, "consumer", RANGE)
        assert (await resent).error == ErrorCode.none

    run(test)


def test_a_sync_pending_when_the_generation_ends_is_answered_rebalance_in_progress() -> None:
    async def test() -> None:
        group = Group("g")
        leader, other = await _stable(group, 2)
        joins = [group.join(m, SLOW, "consumer", RANGE) for m in (leader, other)]
        await asyncio.gather(*joins)
        follower_sync = group.sync(other, group.generation, {})
        await _turn()
        assert not follower_sync.done()
        group.join(other, SLOW, "consumer", RANGE)  # the follower rejoins before the leader synced
        assert await follower_sync == (ErrorCode.rebalance_in_progress, b"")
        with pytest.raises(GroupError) as refused:
            group.sync(leader, group.generation, {})
        assert refused.value.code == ErrorCode.rebalance_in_progress and str(refused.value) == "rebalance_in_progress"

    run(test)


def test_the_leaders_sync_answers_every_waiting_member_and_later_syncs_alike() -> None:
    async def test() -> None:
        group = Group("g")
        leader, other, third = await _stable(group, 3)
        joins = [group.join(m, SLOW, "consumer", RANGE) for m in (leader, other, third)]
        await asyncio.gather(*joins)
        assert all(group.members[m].assignment == b"" for m in (leader, other, third))  # a new generation's
        waiting = group.sync(other, group.generation, {})
        assert await group.sync(leader, group.generation, {leader: b"L", other: b"O"}) == (ErrorCode.none, b"L")
        assert await waiting == (ErrorCode.none, b"O")
        assert await group.sync(third, group.generation, {}) == (ErrorCode.none, b"")  # not in the assignments
        assert await group.sync(other, group.generation, {other: b"ignored"}) == (ErrorCode.none, b"O")
        assert group.state is GroupState.STABLE

    run(test)


def test_a_member_that_leaves_has_its_waiting_join_and_sync_answered_unknown_member() -> None:
    async def test() -> None:
        group = Group("g")
        leader, other = await _stable(group, 2)
        joins = [group.join(m, SLOW, "consumer", RANGE) for m in (leader, other)]
        await asyncio.gather(*joins)
        pending_sync = group.sync(other, group.generation, {})
        await _turn()
        assert group.leave(other) == ErrorCode.none
        assert await pending_sync == (ErrorCode.unknown_member_id, b"")
        assert group.state is GroupState.PREPARING_REBALANCE
        pending_join = group.join(leader, SLOW, "consumer", RANGE)
        rejoined = await pending_join
        assert (rejoined.error, list(group.members)) == (ErrorCode.none, [leader])
        waiting = group.join("", SLOW, "consumer", RANGE)
        await _turn()
        assert group.leave("nobody") == ErrorCode.unknown_member_id
        newcomer = next(m for m in group.members if m != leader)
        assert group.leave(newcomer) == ErrorCode.none
        assert (await waiting).error == ErrorCode.unknown_member_id

    run(test)


def test_the_last_member_leaving_empties_the_group_in_a_new_generation() -> None:
    async def test() -> None:
        group = Group("g")
        (only,) = await _stable(group, 1)
        generation = group.generation
        assert group.leave(only) == ErrorCode.none
        assert (group.state, group.generation, group.protocol, group.leader, group.members) == (
            GroupState.EMPTY, generation + 1, None, None, {})
        again = await group.join("", SLOW, "consumer", RANGE)  # a fresh start
        assert again.generation == generation + 2 and again.leader == again.member_id

    run(test)


def test_a_group_whose_joiners_all_leave_while_preparing_empties_and_stops_its_rebalance_timer() -> None:
    async def test() -> None:
        group = Group("g")
        leader, other = await _stable(group, 2, Joiner("c", "h", 30.0, 0.05))
        waiting = group.join(leader, SLOW, "consumer", RANGE)
        await _turn()
        assert group.leave(other) == ErrorCode.none  # the leader's join completes alone
        assert (await waiting).error == ErrorCode.none
        group.join(leader, SLOW, "consumer", RANGE)
        await _turn()
        assert group.leave(leader) == ErrorCode.none
        assert group.state is GroupState.EMPTY
        await asyncio.sleep(0.1)  # past the 0.05 s rebalance timeout: nothing left to fire
        assert group.state is GroupState.EMPTY and group.members == {}

    run(test)


def test_a_rebalance_timeout_drops_only_the_members_that_did_not_rejoin() -> None:
    async def test() -> None:
        group = Group("g")
        quick = Joiner("c", "h", 30.0, 0.05)
        stayer, straggler, third = await _stable(group, 3, quick)
        joins = [group.join(m, quick, "consumer", RANGE) for m in (stayer, third)]
        results = await asyncio.gather(*joins)
        assert {r.error for r in results} == {ErrorCode.none}
        assert set(group.members) == {stayer, third} and straggler not in group.members

    run(test)


def test_session_expiry_spares_members_waiting_in_a_join_and_rebalances_the_rest() -> None:
    async def test() -> None:
        group = Group("g")
        first, second, third = await _stable(group, 3)
        waiting = group.join(first, SLOW, "consumer", RANGE)  # waits for the others to rejoin
        await _turn()
        for member in group.members.values():
            member.last_seen -= 60  # every session ran out
        group.expire(time.monotonic())
        assert list(group.members) == [first]  # the one in a join is alive
        assert (await waiting).error == ErrorCode.none and group.generation == 4  # 3 to build it, 1 more
        group.members[first].last_seen = time.monotonic()
        group.expire(time.monotonic() + 29)
        assert list(group.members) == [first]
        group.expire(time.monotonic() + 31)
        assert group.members == {} and group.state is GroupState.EMPTY
        assert {second, third}.isdisjoint(group.members)

    run(test)


def test_a_join_marks_the_member_seen() -> None:
    async def test() -> None:
        group = Group("g")
        (member,) = await _stable(group, 1)
        group.members[member].last_seen -= 60
        await group.join(member, SLOW, "consumer", RANGE)
        group.expire(time.monotonic())
        assert list(group.members) == [member]

    run(test)


@pytest.mark.parametrize(("member", "generation", "code"), [
    ("", -1, None), ("", 0, ErrorCode.unknown_member_id), ("stranger", -1, ErrorCode.unknown_member_id),
    ("stranger", 1, ErrorCode.unknown_member_id), ("MEMBER", 1, None), ("MEMBER", 0, ErrorCode.illegal_generation),
    ("MEMBER", -1, ErrorCode.illegal_generation),
])
def test_commits_are_checked_against_the_generation(member, generation, code) -> None:
    """A standalone consumer (no member, generation -1) commits freely; anyone else must be a member
    of the current generation."""
    async def test() -> None:
        group = Group("g")
        (joined,) = await _stable(group, 1)
        name = joined if member == "MEMBER" else member
        if code is None:
            group.check_commit(name, generation)
            return
        with pytest.raises(GroupError) as refused:
            group.check_commit(name, generation)
        assert refused.value.code == code

    run(test)


def test_the_coordinator_keeps_one_group_per_id_and_expires_sessions_until_stopped() -> None:
    async def test() -> None:
        coordinator = GroupCoordinator(check_interval=0.02)
        group = coordinator.group("g")
        assert coordinator.group("g") is group and coordinator.groups == {"g": group} and group.group_id == "g"
        other = coordinator.group("h")
        short = Joiner("c", "h", session_timeout=0.05, rebalance_timeout=1.0)
        (member,) = await _stable(group, 1, short)
        (kept,) = await _stable(other, 1, SLOW)
        deadline = time.monotonic() + 10
        while group.members and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert group.members == {} and list(other.members) == [kept]  # expired by the timer alone
        coordinator.stop()
        coordinator.stop()  # twice is harmless
        (later,) = await _stable(group, 1, short)
        await asyncio.sleep(0.2)
        assert list(group.members) == [later]  # no timer after stop
        assert member != later

    run(test)
