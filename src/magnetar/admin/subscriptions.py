"""`.../{topic}/subscription(s)...`: Pulsar's subscription operations of the topics resource."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from magnetar.admin.messages import entry_response
from magnetar.admin.responses import bool_param, fail, json_body, no_content, path_int
from magnetar.admin.topics import PERSISTENT, TopicsApi
from magnetar.broker.topics.persistent.filter_gate import filter_context
from magnetar.broker.topics.persistent.message_expiry import last_expired_position
from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription
from magnetar.storage import Position
from magnetar.wire.message_id import INT64_MAX

SUBSCRIPTION = PERSISTENT + "/subscription/{subscription}"


def message_id_position(body: Any, default: Position) -> Position:
    """Pulsar's MessageIdImpl JSON (`{"ledgerId": 1, "entryId": 2, ...}`) as a position."""
    if body is None:
        return default
    if not isinstance(body, dict) or not all(isinstance(body.get(k), int) for k in ("ledgerId", "entryId")):
        raise fail(400, 'a message id is {"ledgerId": <int>, "entryId": <int>}')
    return Position(body["ledgerId"], body["entryId"])


class SubscriptionsApi:
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
        ]

    def _subscription(self, request: web.Request) -> PersistentSubscription:
        return self.topics.persistent_topic(request).subscription(request.match_info["subscription"])

    async def list_subscriptions(self, request: web.Request) -> web.Response:
        return web.json_response(sorted(self.topics.persistent_topic(request).subscriptions))

    async def create(self, request: web.Request) -> web.Response:
        topic = self.topics.persistent_topic(request)
        latest = Position(INT64_MAX, INT64_MAX)
        position = message_id_position(await json_body(request), latest)
        topic.create_subscription_at(request.match_info["subscription"], position)
        return no_content()

    async def delete(self, request: web.Request) -> web.Response:
        topic = self.topics.persistent_topic(request)
        topic.delete_subscription(request.match_info["subscription"], force=bool_param(request, "force"))
        return no_content()

    async def skip(self, request: web.Request) -> web.Response:
        self._subscription(request).skip(path_int(request, "count"))
        return no_content()

    async def skip_all(self, request: web.Request) -> web.Response:
        self._subscription(request).clear_backlog()
        return no_content()

    async def reset_to_time(self, request: web.Request) -> web.Response:
        subscription = self._subscription(request)
        position = subscription.topic.find_position_by_time(path_int(request, "timestamp"))
        self._reset(subscription, position)
        return no_content()

    async def reset_to_message_id(self, request: web.Request) -> web.Response:
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
        subscription = self._subscription(request)
        seconds = path_int(request, "seconds")
        last = last_expired_position(subscription.topic, seconds)
        if last > subscription.cursor.mark_delete_position:
            subscription.expire_up_to(last)
        return no_content()

    async def get_properties(self, request: web.Request) -> web.Response:
        return web.json_response(self._subscription(request).properties)

    async def set_properties(self, request: web.Request) -> web.Response:
        """Pulsar's updateSubscriptionProperties: the body replaces them all."""
        body = await json_body(request, {})
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values()):
            raise fail(400, "the body must be a JSON object of string properties")
        subscription = self._subscription(request)
        chain = subscription.topic.entry_filters
        if chain is not None:  # a selector is checked before it replaces a working one
            chain.check_subscription(filter_context(subscription, None, body))
        try:
            subscription.set_properties(body)
        except ValueError as exc:
            raise fail(412, str(exc)) from exc
        return no_content()

    async def peek(self, request: web.Request) -> web.Response:
        """The n-th message of the subscription's backlog (1-based), without acknowledging it."""
        subscription = self._subscription(request)
        position = subscription.nth_unacknowledged(path_int(request, "n"))
        if position is None:
            raise fail(404, "Message not found")
        ledger = subscription.topic.ledger
        return entry_response(position, ledger.read_entry(position), self.service.config.maxMessageSize * 2)
