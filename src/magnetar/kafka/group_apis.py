"""The group APIs: FindCoordinator, Join/Sync/Heartbeat/LeaveGroup, OffsetCommit/Fetch, Describe/ListGroups.

This broker coordinates every group. A group's committed offset for a partition is the
position of the Pulsar subscription named after the group on that partition's topic, so
`magnetar admin topics stats` shows a Kafka group's backlog as any subscription's. Groups
belong to the namespace of the connection naming them: each namespace has a coordinator
of its own, so teams sharing the broker neither see nor join each other's groups.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.kafka.access import CONSUME, GROUP, Access
from magnetar.kafka.errors import ANSWERABLE, kafka_error
from magnetar.kafka.groups import GroupCoordinator, GroupError, Joiner
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request

_NO_WAIT = datetime.timedelta(0)
_NO_AUTHORIZED_OPERATIONS = -2147483648
_GROUP_KEY = 0  # FindCoordinator's key_type of a consumer group (1: a transactional id)
NO_TRANSACTIONS = "this broker does not serve Kafka transactions (transactional.id): see docs/kafka.md"
FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS = 11, 12, 13, 14, 15, 16


class GroupApis:
    def __init__(self, node_id: int, *, transactions: bool = False) -> None:
        self._node_id = node_id
        self._transactions = transactions
        self.coordinators: dict[str, GroupCoordinator] = {}

    def coordinator(self, access: Access) -> GroupCoordinator:
        """The coordinator of the connection's namespace, started by its first group."""
        namespace = access.topics.namespace
        found = self.coordinators.get(namespace)
        if found is None:
            found = self.coordinators[namespace] = GroupCoordinator()
        return found

    def stop(self) -> None:
        for coordinator in self.coordinators.values():
            coordinator.stop()

    # -- finding the coordinator: always this broker
    def find_coordinator(self, request: Request, access: Access) -> Any:
        module = response_module(FIND_COORDINATOR, request.api_version)
        (host, port), node_id = access.address, self._node_id
        is_group = getattr(request.body, "key_type", _GROUP_KEY) == _GROUP_KEY
        message = None
        if not is_group:  # a transactional id's coordinator: this broker, when it has transactions
            error, message = (ErrorCode.none, None) if self._transactions else (
                ErrorCode.coordinator_not_available, NO_TRANSACTIONS)  # what Kafka answers while it has none
        elif not access.namespace(GROUP):
            error = ErrorCode.group_authorization_failed
        else:
            error = ErrorCode.none
        found = {"node_id": node_id, "host": host, "port": port, "error_code": error, "error_message": message}
        keys = getattr(request.body, "coordinator_keys", None)
        coordinators = tuple(build(module, "Coordinator", key=key, **found) for key in keys or ())
        return build(module, "FindCoordinatorResponse", throttle_time=_NO_WAIT, coordinators=coordinators, **found)

    # -- membership
    async def join_group(self, request: Request, access: Access) -> Any:
        module = response_module(JOIN_GROUP, request.api_version)
        body = request.body
        rebalance = getattr(body, "rebalance_timeout", body.session_timeout)
        try:
            access.group()
            joiner = Joiner(request.client_id or "", "", body.session_timeout.total_seconds(),
                            rebalance.total_seconds())
            pending = self.coordinator(access).group(body.group_id).join(
                body.member_id, joiner, body.protocol_type, [(p.name, p.metadata) for p in body.protocols])
            result = await pending
        except GroupError as exc:
            return build(module, "JoinGroupResponse", throttle_time=_NO_WAIT, error_code=exc.code, generation_id=-1,
                         protocol_type=None, protocol_name=None, leader="", member_id=body.member_id, members=())
        members = tuple(build(module, "JoinGroupResponseMember", member_id=member_id, group_instance_id=None,
                              metadata=metadata) for member_id, metadata in result.members)
        return build(module, "JoinGroupResponse", throttle_time=_NO_WAIT, error_code=result.error,
                     generation_id=result.generation, protocol_type=body.protocol_type,
                     protocol_name=result.protocol or "", leader=result.leader, member_id=result.member_id,
                     members=members)

    async def sync_group(self, request: Request, access: Access) -> Any:
        module = response_module(SYNC_GROUP, request.api_version)
        body = request.body
        group = self.coordinator(access).group(body.group_id)
        try:
            access.group()
            error, assignment = await group.sync(body.member_id, body.generation_id,
                                                 {a.member_id: a.assignment for a in body.assignments})
        except GroupError as exc:
            error, assignment = exc.code, b""
        return build(module, "SyncGroupResponse", throttle_time=_NO_WAIT, error_code=error,
                     protocol_type=group.protocol_type, protocol_name=group.protocol, assignment=assignment)

    def heartbeat(self, request: Request, access: Access) -> Any:
        body = request.body
        try:
            access.group()
            error = self.coordinator(access).group(body.group_id).heartbeat(body.member_id, body.generation_id)
        except GroupError as exc:
            error = exc.code
        return build(response_module(HEARTBEAT, request.api_version), "HeartbeatResponse", throttle_time=_NO_WAIT,
                     error_code=error)

    def leave_group(self, request: Request, access: Access) -> Any:
        module = response_module(LEAVE_GROUP, request.api_version)
        body = request.body
        group = self.coordinator(access).group(body.group_id)
        identities = getattr(body, "members", None)
        try:
            access.group()
        except GroupError as exc:
            return build(module, "LeaveGroupResponse", throttle_time=_NO_WAIT, error_code=exc.code, members=())
        if identities is None:
            return build(module, "LeaveGroupResponse", throttle_time=_NO_WAIT, error_code=group.leave(body.member_id))
        members = tuple(build(module, "MemberResponse", member_id=m.member_id, group_instance_id=m.group_instance_id,
                              error_code=group.leave(m.member_id)) for m in identities)
        return build(module, "LeaveGroupResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none, members=members)

    # -- offsets
    def offset_commit(self, request: Request, access: Access) -> Any:
        module = response_module(OFFSET_COMMIT, request.api_version)
        body = request.body
        error = ErrorCode.none
        try:
            access.group()
            group = self.coordinator(access).group(body.group_id)
            group.check_commit(body.member_id, body.generation_id_or_member_epoch)
        except GroupError as exc:
            error = exc.code
        topics = []
        for topic in body.topics:
            partitions = tuple(build(module, "OffsetCommitResponsePartition", partition_index=p.partition_index,
                                     error_code=error if error != ErrorCode.none else self._commit(
                                         body.group_id, topic.name, p.partition_index, p.committed_offset,
                                         p.committed_metadata, access)) for p in topic.partitions)
            topics.append(build(module, "OffsetCommitResponseTopic", name=topic.name, partitions=partitions))
        return build(module, "OffsetCommitResponse", throttle_time=_NO_WAIT, topics=tuple(topics))

    def _commit(self, group: str, topic: str, partition: int, offset: int, metadata: str | None,
                access: Access) -> ErrorCode:
        try:
            access.topic(CONSUME, topic)
            access.topics.log(topic, partition).commit_offset(group, offset, metadata)
        except ANSWERABLE as exc:
            return kafka_error(exc)[0]
        return ErrorCode.none

    def offset_fetch(self, request: Request, access: Access) -> Any:
        module = response_module(OFFSET_FETCH, request.api_version)
        body = request.body
        if not access.namespace(GROUP):
            return build(module, "OffsetFetchResponse", throttle_time=_NO_WAIT, topics=(),
                         error_code=ErrorCode.group_authorization_failed)
        if body.topics is None:
            wanted = [(name, range(access.topics.partitions(name) or 0)) for name in access.topics.names()]
        else:
            wanted = [(t.name, t.partition_indexes) for t in body.topics]
        topics = []
        for name, indexes in wanted:
            partitions = [self._fetched(module, body.group_id, name, index, access) for index in indexes]
            if body.topics is None:
                partitions = [p for p in partitions if p.committed_offset >= 0]
            if partitions:
                topics.append(build(module, "OffsetFetchResponseTopic", name=name, partitions=tuple(partitions)))
        return build(module, "OffsetFetchResponse", throttle_time=_NO_WAIT, topics=tuple(topics),
                     error_code=ErrorCode.none)

    def _fetched(self, module: Any, group: str, topic: str, partition: int, access: Access) -> Any:
        error, committed = ErrorCode.none, None
        try:
            access.topic(CONSUME, topic)
            committed = access.topics.log(topic, partition).committed_offset(group)
        except ANSWERABLE as exc:
            error = kafka_error(exc)[0]
        offset, metadata = committed if committed is not None else (-1, "")
        return build(module, "OffsetFetchResponsePartition", partition_index=partition, committed_offset=offset,
                     committed_leader_epoch=-1, metadata=metadata, error_code=error)

    # -- describing
    def describe_groups(self, request: Request, access: Access) -> Any:
        module = response_module(DESCRIBE_GROUPS, request.api_version)
        error = ErrorCode.none if access.namespace(GROUP) else ErrorCode.group_authorization_failed
        described = []
        for group_id in request.body.groups:
            group = self.coordinator(access).groups.get(group_id) if error == ErrorCode.none else None
            members = () if group is None else tuple(build(
                module, "DescribedGroupMember", member_id=m.member_id, group_instance_id=None, client_id=m.client_id,
                client_host=m.client_host, member_metadata=dict(m.protocols).get(group.protocol or "", b""),
                member_assignment=m.assignment) for m in group.members.values())
            described.append(build(
                module, "DescribedGroup", error_code=error, group_id=group_id,
                group_state="Dead" if group is None else group.state.value,
                protocol_type="" if group is None else group.protocol_type or "",
                protocol_data="" if group is None else group.protocol or "", members=members,
                authorized_operations=_NO_AUTHORIZED_OPERATIONS))
        return build(module, "DescribeGroupsResponse", throttle_time=_NO_WAIT, groups=tuple(described))

    def list_groups(self, request: Request, access: Access) -> Any:
        """The groups, for a role that may use them (Kafka lists those a role may describe)."""
        module = response_module(LIST_GROUPS, request.api_version)
        if not access.namespace(GROUP):
            return build(module, "ListGroupsResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none, groups=())
        wanted = set(getattr(request.body, "states_filter", ()) or ())
        groups = tuple(build(module, "ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type or "",
                             group_state=g.state.value) for g in self.coordinator(access).groups.values()
                       if not wanted or g.state.value in wanted)
        return build(module, "ListGroupsResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none, groups=groups)
