"""`.../{topic}/subscription(s)...`: Pulsar's subscription operations of the topics resource."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magnetar import web
from magnetar.admin.messages import entry_response
from magnetar.admin.responses import bool_param, fail, json_body, no_content, path_int
from magnetar.admin.topics import PERSISTENT, TopicsApi
from magnetar.broker.errors import BrokerServiceError, ResourceConflictError
from magnetar.broker.topics.persistent.filter_gate import filter_context
from magnetar.broker.topics.persistent.message_expiry import last_expired_position
from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.storage import Position
from magnetar.wire.message_id import INT64_MAX

SUBSCRIPTION = PERSISTENT + "/subscription/{subscription}"
#: Pulsar's refusals of what it does on one partition only.
NO_PARTITIONED_SKIP = "Skip messages on a partitioned topic is not allowed"
NO_PARTITIONED_PEEK = "Peek messages on a partitioned topic is not allowed"
NO_PARTITIONED_RESET_TO_ID = "Reset-cursor at position is not allowed for partitioned-topic"


def message_id_position(body: Any, default: Position) -> Position:
    """Pulsar's MessageIdImpl JSON (`{"ledgerId": 1, "entryId": 2, ...}`) as a position."""
    if body is None:
        return default
    if not isinstance(body, dict) or not all(isinstance(body.get(k), int) for k in ("ledgerId", "entryId")):
        raise fail(400, 'a message id is {"ledgerId": <int>, "entryId": <int>}')
    return Position(body["ledgerId"], body["entryId"])


def on_each(topics: list[PersistentTopic], action: Callable[[PersistentTopic], object]) -> None:
    """`action` on every topic (a partitioned topic's partitions), then the first failure:
    Pulsar runs a partitioned topic's operation on all partitions at once and reports one
    partition's error, so the partitions that could be changed are."""
    first: BrokerServiceError | None = None
    for topic in topics:
        try:
            action(topic)
        except BrokerServiceError as exc:
            first = first or exc
    if first is not None:
        raise first


class SubscriptionsApi:
    """A partitioned topic's name stands for all its partitions (Pulsar's PersistentTopicsBase):
    create, delete, skip_all, reset to a time, expire and the properties apply to each;
    skip, peek and reset to a message id, which name one partition's entries, are refused
    with 405."""

    def __init__(self, topics: TopicsApi) -> None:
        self.topics = topics
        self.service = topics.service

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(PERSISTENT + "/subscriptions", self.list_subscriptions),
            web.put(SUBSCRIPTION, self.create),
            web.delete(SUBSCRIPTION, self.delete),
            web.post(SUBSCRIPTION + "/skip/{count}", self.skip),
            web.post(SUBSCRIPTION + "/skip_all", self.skip_all),
            web.post(SUBSCRIPTION + "/resetcursor/{timestamp}", self.reset_to_time),
            web.post(SUBSCRIPTION + "/resetcursor", self.reset_to_message_id),
            web.post(SUBSCRIPTION + "/expireMessages/{seconds}", self.expire),
            web.get(SUBSCRIPTION + "/position/{n}", self.peek),
            web.get(SUBSCRIPTION + "/properties", self.get_properties),
            web.put(SUBSCRIPTION + "/properties", self.set_properties),
            web.get(SUBSCRIPTION + "/replicatedSubscriptionStatus", self.replicated_status),
            web.post(SUBSCRIPTION + "/replicatedSubscriptionStatus", self.set_replicated_status),
        ]

    def _subscription(self, request: web.Request) -> PersistentSubscription:
        return self.topics.persistent_topic(request).subscription(request.match_info["subscription"])

    def _subscriptions(self, request: web.Request) -> list[PersistentSubscription]:
        """The named subscription of the topic, or of every partition (404 when one lacks it)."""
        name = request.match_info["subscription"]
        return [topic.subscription(name) for topic in self.topics.persistent_topics(request)]

    def _on_each_subscription(self, request: web.Request,
                              action: Callable[[PersistentSubscription], object]) -> None:
        name = request.match_info["subscription"]
        on_each(self.topics.persistent_topics(request), lambda topic: action(topic.subscription(name)))

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        """On a partitioned topic, every subscription any partition has."""
        topics = self.topics.persistent_topics(request)
        return web.json_response(sorted({name for topic in topics for name in topic.subscriptions}))

    async def create(self, request: web.Request) -> web.Response:
        """On a partitioned topic, on each partition that lacks it: 409 only when all have it."""
        topics = self.topics.persistent_topics(request)
        latest = Position(INT64_MAX, INT64_MAX)
        position = message_id_position(await json_body(request), latest)
        name = request.match_info["subscription"]
        absent = [topic for topic in topics if name not in topic.subscriptions]
        if not absent:
            raise ResourceConflictError("Subscription already exists for topic")
        on_each(absent, lambda topic: topic.create_subscription_at(name, position))
        return no_content()

    async def delete(self, request: web.Request) -> web.Response:
        name, force = request.match_info["subscription"], bool_param(request, "force")
        on_each(self.topics.persistent_topics(request), lambda topic: topic.delete_subscription(name, force=force))
        return no_content()

    async def skip(self, request: web.Request) -> web.Response:
        self.topics.refuse_partitioned(request, NO_PARTITIONED_SKIP)
        self._subscription(request).skip(path_int(request, "count"))
        return no_content()

    async def skip_all(self, request: web.Request) -> web.Response:
        self._on_each_subscription(request, PersistentSubscription.clear_backlog)
        return no_content()

    async def reset_to_time(self, request: web.Request) -> web.Response:
        """Each partition to its own first entry published at or after the time."""
        timestamp = path_int(request, "timestamp")
        self._on_each_subscription(
            request, lambda sub: self._reset(sub, sub.topic.find_position_by_time(timestamp)))
        return no_content()

    async def reset_to_message_id(self, request: web.Request) -> web.Response:
        self.topics.refuse_partitioned(request, NO_PARTITIONED_RESET_TO_ID)
        subscription = self._subscription(request)
        body = await json_body(request)
        if body is None:
            raise fail(400, "the body must be the message id to reset to")
        self._reset(subscription, message_id_position(body, Position(-1, -1)))
        return no_content()

    @staticmethod
    def _reset(subscription: PersistentSubscription, position: Position) -> None:
        for consumer in subscription.reset_cursor(position):
            consumer.cnx.tell_consumer_closed(consumer)

    async def expire(self, request: web.Request) -> web.Response:
        seconds = path_int(request, "seconds")
        self._on_each_subscription(request, lambda sub: self._expire(sub, seconds))
        return no_content()

    @staticmethod
    def _expire(subscription: PersistentSubscription, seconds: int) -> None:
        last = last_expired_position(subscription.topic, seconds)
        if last > subscription.cursor.mark_delete_position:
            subscription.expire_up_to(last)

    async def get_properties(self, request: web.Request) -> web.Response:
        """On a partitioned topic, the partitions' properties merged (they are set together)."""
        merged: dict[str, str] = {}
        for subscription in self._subscriptions(request):
            merged.update(subscription.properties)
        return web.json_response(merged)

    async def set_properties(self, request: web.Request) -> web.Response:
        """Pulsar's updateSubscriptionProperties: the body replaces them all."""
        body = await json_body(request, {})
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
            raise fail(400, "the body must be a JSON object of string properties")
        subscriptions = self._subscriptions(request)
        for subscription in subscriptions:
            chain = subscription.topic.entry_filters
            if chain is not None:  # a selector is checked before it replaces a working one
                chain.check_subscription(filter_context(subscription, None, body))
        try:
            for subscription in subscriptions:
                subscription.set_properties(body)
        except ValueError as exc:
            raise fail(412, str(exc)) from exc
        return no_content()

    async def replicated_status(self, request: web.Request) -> web.Response:
        """Pulsar's answer: per topic (each partition of a partitioned one), the flag."""
        return web.json_response({str(sub.topic.name): sub.replicated for sub in self._subscriptions(request)})

    async def set_replicated_status(self, request: web.Request) -> web.Response:
        """The body is `true` or `false`; on a partitioned topic it applies to each partition."""
        body = await json_body(request)
        if not isinstance(body, bool):
            raise fail(400, "the body must be true or false")
        if body and not self.service.config.enableReplicatedSubscriptions:
            raise fail(405, "Replicated Subscription is disabled (enableReplicatedSubscriptions=false)")
        subscriptions = self._subscriptions(request)
        if not all(sub.durable for sub in subscriptions):
            raise fail(405, "a non-durable subscription cannot be replicated")
        for subscription in subscriptions:
            subscription.set_replicated(body)
        return no_content()

    async def peek(self, request: web.Request) -> web.Response:
        """The n-th message of the subscription's backlog (1-based), without acknowledging it."""
        self.topics.refuse_partitioned(request, NO_PARTITIONED_PEEK)
        subscription = self._subscription(request)
        position = subscription.nth_unacknowledged(path_int(request, "n"))
        if position is None:
            raise fail(404, "Message not found")
        ledger = subscription.topic.ledger
        return entry_response(position, ledger.read_entry(position), self.service.config.maxMessageSize * 2)
