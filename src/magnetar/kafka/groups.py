"""Kafka's classic consumer-group protocol: members join, the leader assigns, everyone syncs.

The coordinator keeps each group's membership in memory (a restarted broker sees members
rejoin, as after a coordinator failover); what must survive is the committed offsets,
which live in the subscription cursors (see offsets.py). Assignment is the clients' own:
the coordinator hands the leader every member's subscription metadata and passes the
leader's assignments on, never reading either.

States as Kafka names them: Empty -> PreparingRebalance (joins collected until every
known member has rejoined, or the rebalance timeout drops the stragglers) ->
CompletingRebalance (the leader's SyncGroup awaited) -> Stable. A member missing its
session timeout is removed and the others rebalance.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from kio.schema.errors import ErrorCode


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


Synced = tuple[ErrorCode, bytes]
"""A SyncGroup's answer: the error, and the member's assignment."""


class Joiner(NamedTuple):
    """Who asks to join: the client and its timeouts (seconds)."""

    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)
    join: asyncio.Future[JoinResult] | None = None
    sync: asyncio.Future[Synced] | None = None


@dataclass(slots=True)
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, bytes]] = field(default_factory=list)  # for the leader only


class GroupError(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    _rebalance_timer: asyncio.TimerHandle | None = None

    # -- join
    def join(self, member_id: str, joiner: Joiner, protocol_type: str,
             protocols: list[tuple[str, bytes]]) -> asyncio.Future[JoinResult]:
        if self.protocol_type is not None and self.members and protocol_type != self.protocol_type:
            raise GroupError(ErrorCode.inconsistent_group_protocol)
        if member_id and member_id not in self.members:
            raise GroupError(ErrorCode.unknown_member_id)
        if not self._supports_common_protocol(protocols):
            raise GroupError(ErrorCode.inconsistent_group_protocol)
        if not member_id:
            member_id = f"{joiner.client_id or 'member'}-{uuid.uuid4()}"
        member = self.members.get(member_id)
        if member is None:
            member = self.members[member_id] = Member(member_id, joiner.client_id, joiner.client_host,
                                                      joiner.session_timeout, joiner.rebalance_timeout, protocols)
        member.protocols = protocols
        member.session_timeout, member.rebalance_timeout = joiner.session_timeout, joiner.rebalance_timeout
        member.last_seen = time.monotonic()
        self.protocol_type = protocol_type
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        if member.join is not None and not member.join.done():
            member.join.set_result(JoinResult(ErrorCode.unknown_member_id))  # superseded by this join
        member.join = future
        self._prepare_rebalance()
        self._maybe_complete_join()
        return future

    def _supports_common_protocol(self, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        return bool(names) and all(names & {name for name, _ in m.protocols} for m in self.members.values())

    def _prepare_rebalance(self) -> None:
        if self.state is GroupState.PREPARING_REBALANCE:
            return
        if self.state is GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():  # a sync still waiting: its generation is over
                _resolve(member.sync, (ErrorCode.rebalance_in_progress, b""))
        self.state = GroupState.PREPARING_REBALANCE
        timeout = max(m.rebalance_timeout for m in self.members.values())  # called with members only
        self._rebalance_timer = asyncio.get_running_loop().call_later(timeout, self._rebalance_timed_out)

    def _rebalance_timed_out(self) -> None:
        self._rebalance_timer = None
        for member_id, member in list(self.members.items()):
            if member.join is None or member.join.done():
                del self.members[member_id]
        self._maybe_complete_join()

    def _maybe_complete_join(self) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        if not self.members:
            self._become_empty()
            return
        if any(m.join is None or m.join.done() for m in self.members.values()):
            return
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        self.generation += 1
        self.protocol = self._choose_protocol()
        # the oldest member: members keep their places, so a leader still a member stays the leader
        leader = self.leader = next(iter(self.members))
        self.state = GroupState.COMPLETING_REBALANCE
        metadata = [(m.member_id, dict(m.protocols)[self.protocol]) for m in self.members.values()]
        for member in self.members.values():
            member.assignment = b""
            is_leader = member.member_id == leader
            _resolve(member.join, JoinResult(ErrorCode.none, self.generation, self.protocol, leader,
                                             member.member_id, metadata if is_leader else []))

    def _choose_protocol(self) -> str:
        """The first protocol of the leader-to-be's preference that every member supports."""
        first = next(iter(self.members.values()))
        common = set.intersection(*({name for name, _ in m.protocols} for m in self.members.values()))
        return next(name for name, _ in first.protocols if name in common)

    def _become_empty(self) -> None:
        self.state = GroupState.EMPTY
        self.generation += 1
        self.protocol = self.leader = None

    # -- sync, heartbeat, leave
    def _member(self, member_id: str, generation: int) -> Member:
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id)
        if generation != self.generation:
            raise GroupError(ErrorCode.illegal_generation)
        member.last_seen = time.monotonic()
        return member

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes]) -> asyncio.Future[Synced]:
        member = self._member(member_id, generation)
        if self.state is GroupState.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress)
        future: asyncio.Future[Synced] = asyncio.get_running_loop().create_future()
        if self.state is GroupState.STABLE:
            future.set_result((ErrorCode.none, member.assignment))
            return future
        member.sync = future
        if member_id == self.leader:
            for other in self.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            self.state = GroupState.STABLE
            for other in self.members.values():
                _resolve(other.sync, (ErrorCode.none, other.assignment))
        return future

    def heartbeat(self, member_id: str, generation: int) -> ErrorCode:
        self._member(member_id, generation)
        if self.state is not GroupState.STABLE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, member_id: str) -> ErrorCode:
        member = self.members.pop(member_id, None)
        if member is None:
            return ErrorCode.unknown_member_id
        self._removed(member)
        return ErrorCode.none

    def _removed(self, member: Member) -> None:
        _resolve(member.join, JoinResult(ErrorCode.unknown_member_id))
        _resolve(member.sync, (ErrorCode.unknown_member_id, b""))
        if not self.members:
            if self._rebalance_timer is not None:
                self._rebalance_timer.cancel()
                self._rebalance_timer = None
            self._become_empty()
            return
        self._prepare_rebalance()
        self._maybe_complete_join()

    def expire(self, now: float) -> None:
        """Remove members whose session ran out (a member waiting in a join is alive)."""
        for member_id, member in list(self.members.items()):
            waiting = member.join is not None and not member.join.done()
            if not waiting and now - member.last_seen > member.session_timeout:
                del self.members[member_id]
                self._removed(member)

    def check_commit(self, member_id: str, generation: int) -> None:
        """A commit from outside the group's current generation is refused (a commit with
        generation -1 and no member is a standalone consumer's: accepted)."""
        if generation < 0 and not member_id:
            return
        self._member(member_id, generation)


def _resolve(future: asyncio.Future, value: object) -> None:
    if future is not None and not future.done():
        future.set_result(value)


class GroupCoordinator:
    """Every group of one broker, and the timer that expires their members' sessions."""

    def __init__(self, check_interval: float = 1.0) -> None:
        self.groups: dict[str, Group] = {}
        self._interval = check_interval
        self._timer: asyncio.TimerHandle | None = None

    def group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._expire)
        return group

    def _expire(self) -> None:
        now = time.monotonic()
        for group in self.groups.values():
            group.expire(now)
        self._timer = asyncio.get_running_loop().call_later(self._interval, self._expire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
