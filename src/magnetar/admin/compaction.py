"""`.../{topic}/compaction`: start a compaction (PUT) and ask how it went (GET), as
pulsar-admin's `topics compact` and `topics compaction-status` do. On a partitioned
topic's name both act on every partition.

`POST .../compaction/adopt` (magnetar's) is the handshake of a compaction computed outside
the broker (`magnetar.spark.compact`): the job stages a compacted ledger beside the
topic's and names it with the horizon it covers and the horizon it started from; the
broker owning the topic checks both and switches to it in one metadata put, or refuses
(409 when the topic was compacted meanwhile, 412 when the staged files or horizon do not
fit) and leaves the compaction in force untouched."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from magnetar import web
from magnetar.admin.responses import fail, json_body, no_content
from magnetar.broker.compaction import AdoptionConflict, AdoptionRefused, CompactionStatus
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
from magnetar.storage import Position
from magnetar.wire.topic_name import TopicName

#: Which status a partitioned topic reports when its partitions differ: the first found.
_PRECEDENCE = ("RUNNING", "ERROR", "NOT_RUN", "SUCCESS")


def compaction_routes(url: str, service: BrokerService,
                      topic_name: Callable[[web.Request], TopicName]) -> list[web.RouteDef]:

    def targets(request: web.Request) -> list[TopicName]:
        name = topic_name(request)
        partitions = service.partitions_of(name)
        if partitions:
            return [name.partition(i) for i in range(partitions)]
        if not service.topic_exists(name):
            raise fail(404, "Topic not found")
        return [name]

    async def compact(request: web.Request) -> web.Response:
        names = targets(request)
        running = [str(n) for n in names if service.compaction.running(str(n))]
        if running:
            raise fail(409, f"Compaction already in progress on {running[0]}")
        for name in names:
            topic = service.get_topic(str(name))
            assert isinstance(topic, PersistentTopic)  # the route names the persistent domain
            service.compaction.trigger(topic)
        return no_content()

    async def status(request: web.Request) -> web.Response:
        statuses = [service.compaction.status(str(name)) for name in targets(request)]
        return web.json_response(_combined(statuses).to_json())

    async def adopt(request: web.Request) -> web.Response:
        name = topic_name(request)
        if service.partitions_of(name):
            raise fail(400, "adopt names one partition: a partitioned topic's partitions are compacted one by one")
        if not service.topic_exists(name):
            raise fail(404, "Topic not found")
        staging, horizon, base, entries = _adoption(await json_body(request))
        topic = service.get_topic(str(name))
        assert isinstance(topic, PersistentTopic)
        try:
            await service.compaction.adopt(topic, staging, horizon, base, entries)
        except AdoptionConflict as exc:
            raise fail(409, str(exc)) from None
        except AdoptionRefused as exc:
            raise fail(412, str(exc)) from None
        return no_content()

    return [web.put(url, compact), web.get(url, status), web.post(url + "/adopt", adopt)]


def _position(body: dict[str, Any], field: str) -> Position | None:
    value = body.get(field)
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and v >= 0 for v in value)):
        raise fail(400, f"{field}: expected [ledgerId, entryId], got {value!r}")
    return Position(*value)


def _adoption(body: Any) -> tuple[str, Position, Position | None, int]:
    """The adopt request's fields: staging (name), horizon, base (null: never compacted), entries."""
    if not isinstance(body, dict):
        raise fail(400, "expected a JSON object with staging, horizon, base and entries")
    staging, entries = body.get("staging"), body.get("entries")
    if not isinstance(staging, str):
        raise fail(400, "staging: expected the staging directory's name")
    if not isinstance(entries, int) or entries < 0:
        raise fail(400, f"entries: expected a non-negative integer, got {entries!r}")
    horizon = _position(body, "horizon")
    if horizon is None:
        raise fail(400, "horizon: required")
    return staging, horizon, _position(body, "base"), entries


def _combined(statuses: list[CompactionStatus]) -> CompactionStatus:
    if len(statuses) == 1:
        return statuses[0]
    found = {s.status for s in statuses}
    status = next(name for name in _PRECEDENCE if name in found)
    errors = "; ".join(s.last_error for s in statuses if s.last_error)
    progress = sum(s.progress for s in statuses) / len(statuses)
    return CompactionStatus(status, errors, progress)
