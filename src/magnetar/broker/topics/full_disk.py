"""What the broker does while its disk is full: producers are held, as Pulsar's backlog quota
policy `producer_request_hold` holds them, with the disk as the quota.

Why not answer each SEND with an error (PersistenceError, what Pulsar sends when BookKeeper
cannot write): the official client (C++, which the Python client wraps) drops its whole
connection on any SEND_ERROR but a checksum one, re-creates every producer and consumer on
it, sends again and restarts its send timer with each re-created producer. Against a disk
that stays full that is a reconnect storm in which no send ever times out.

Instead, when a topic's write fails for space, its producers are closed (CLOSE_PRODUCER: the
TCP connection stays, and with it the consumers reading on it) and refused on their return
with ProducerBlockedQuotaExceededError, as is a producer new to the broker. The official
client reports that at once to a new producer; an existing one keeps its sends pending,
tries again with its backoff (0.1 s doubling to 60 s) and fails each send with Timeout at
its send timeout, as Pulsar's clients do for a held producer. A new subscription whose
cursor cannot be stored is refused with NotAllowedError, which the client reports at once
(a retryable code would leave it waiting out its operation timeout).

Room coming back is seen by any ledger write that lands, or by a probe (storage.disk_space)
repeated while the disk is full; then each producer held on a connection still open is
told to come back now: a CLOSE_PRODUCER naming this broker as the one the topic is assigned
to (PIP-307), which the official client answers with an immediate reconnection instead of
waiting out its backoff.

One line is logged when writes start failing and one when they resume, with the counts of
what was refused in between; the refusals themselves are not logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.storage.disk_space import DiskSpace, SpaceChange
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_topic import AbstractTopic
    from magnetar.broker.topics.cnx import TransportCnx
    from magnetar.broker.topics.loop_bridge import LoopBridge

log = logging.getLogger(__name__)
T = pb.BaseCommand
PROBE_MAX_INTERVAL_SECONDS = 1.0
"""Longest pause between probes while the disk is full (0.1 s doubling): how late a broker
whose producers are held sees room come back. A probe is one fallocate and one ftruncate."""
FIRST_PROBE_SECONDS = 0.1


@dataclass(slots=True)
class _Refusals:
    """What the broker refused since the disk filled, for the line logged when it has room again."""

    producers: int = 0
    subscriptions: int = 0
    other: int = 0


class FullDisk:
    def __init__(self, space: DiskSpace) -> None:
        self._space = space
        self._held: dict[tuple[TransportCnx, int], None] = {}
        """Producers refused while the disk is full, on connections still open: told to come back."""
        self._refusals = _Refusals()
        self._announced = False
        """Whether the loop has logged the disk full (and is probing): the state it acts on."""
        self._probing: asyncio.Task[None] | None = None

    @property
    def full(self) -> bool:
        return self._space.full

    @property
    def reason(self) -> str:
        """Why writes fail (empty while they do not)."""
        return self._space.reason

    def start(self, bridge: LoopBridge) -> None:
        """Listen to storage (whose changes come on any thread) from the running loop."""
        self._space.add_listener(lambda change: bridge.post(self._changed, change))
        if self._space.full:
            self._changed(None)

    def stop(self) -> None:
        if self._probing is not None:
            self._probing.cancel()

    # -- what clients are told
    def refusal(self, cnx: TransportCnx, cmd: pb.BaseCommand, reason: BaseException) -> tuple[int, str]:
        """The ServerError code and message for a command the disk had no room for; counted,
        not logged. A producer coming back (epoch > 0: a new one fails for good) is
        remembered, to be told when it may."""
        if cmd.type == T.PRODUCER:
            self._refusals.producers += 1
            if cmd.producer.epoch > 0:
                self._held[(cnx, cmd.producer.producer_id)] = None
            return (pb.ProducerBlockedQuotaExceededError,
                    f"the broker's disk is full ({reason}): producers are held until a write fits again")
        if cmd.type == T.SUBSCRIBE:
            self._refusals.subscriptions += 1
            return (pb.NotAllowedError,
                    f"the broker's disk is full ({reason}): a new subscription cannot be stored until there is room")
        self._refusals.other += 1
        return pb.ServiceNotReady, f"the broker's disk is full: {reason}"

    def producer_admitted(self, cnx: TransportCnx, producer_id: int) -> None:
        """A held producer came back by itself: nothing left to tell it."""
        if self._held:
            self._held.pop((cnx, producer_id), None)

    def forget(self, cnx: TransportCnx, producer_id: int | None = None) -> None:
        """The client closed a held producer, or the whole connection (`producer_id` None)."""
        if not self._held:
            return
        if producer_id is not None:
            self._held.pop((cnx, producer_id), None)
            return
        for key in [key for key in self._held if key[0] is cnx]:
            del self._held[key]

    @staticmethod
    def write_failed(topic: AbstractTopic) -> None:
        """A write of `topic` found no room: its producers are closed (and held on their return)."""
        topic.disconnect_clients(consumers=lambda _consumer: False)

    async def check(self) -> str | None:
        """Why no write can succeed now, or None: the health check's question, put to the disk
        itself (a probe), so that a disk filled by someone else while nothing wrote is seen,
        and room coming back is seen at once."""
        with contextlib.suppress(OSError):  # not a full disk: the health check does not judge it
            await asyncio.get_running_loop().run_in_executor(None, self._space.probe)
        return self.reason if self._space.full else None

    # -- the loop's view of storage
    def _changed(self, change: SpaceChange | None) -> None:
        """Storage changed state (on some thread) or a probe ended: act on where it is now,
        which may already differ from `change`, since changes race across threads."""
        if self._space.full and not self._announced:
            self._announced = True
            log.warning("disk full (%s): producers are held and new subscriptions refused until a write fits "
                        "again; reads and acknowledgements go on", self._space.reason)
            self._probing = asyncio.get_running_loop().create_task(self._probe())
        elif not self._space.full and self._announced:
            self._announced = False
            self._room_again(change if change is not None and not change.full else None)

    def _room_again(self, change: SpaceChange | None) -> None:
        refusals, self._refusals = self._refusals, _Refusals()
        held, self._held = self._held, {}
        log.info("disk has room again%s: %d writes refused for space; %d producer registrations refused "
                 "(%d producers held), %d new subscriptions refused, %d other commands refused",
                 f" after {change.seconds:.1f} s" if change is not None else "",
                 change.refused if change is not None else 0, refusals.producers, len(held),
                 refusals.subscriptions, refusals.other)
        for cnx, producer_id in held:
            cnx.recall_producer(producer_id)

    async def _probe(self) -> None:
        """While the disk is full, ask it for room now and then: producers are held, so
        nothing else may write to find out."""
        delay = FIRST_PROBE_SECONDS
        loop = asyncio.get_running_loop()
        while self._space.full:
            await asyncio.sleep(delay)
            delay = min(PROBE_MAX_INTERVAL_SECONDS, delay * 2)
            try:
                await loop.run_in_executor(None, self._space.probe)
            except OSError as exc:  # not a full disk (permissions, a failing device): keep asking
                log.debug("disk space probe failed: %s", exc)
        self._probing = None
        self._changed(None)
