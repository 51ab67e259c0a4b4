"""Judge a `traffic.Run` afterwards, from its timeline, against what Pulsar promises.

- At least once: every message whose send succeeded was received and acknowledged (and
  the run checks the subscription's backlog ended at zero).
- Key_Shared, in order (AUTO_SPLIT; PersistentStickyKeyDispatcherMultipleConsumers with
  draining hashes, PIP-379), per sticky key: the key an entry is routed by, its first
  message's (a Default batch holds several keys and goes by its first; a KeyBased batch
  has one). Order is judged per entry, on (partition, sticky key):
  * an entry reaches an application for the first time only once every earlier entry of
    its key reached one, and once every earlier entry that had to come again came again
    (or was acknowledged meanwhile): one whose consumer left without acknowledging it, or
    that was unacknowledged when the broker went down. After a restart anything not yet
    acknowledged may come again (at least once); only these must come before newer ones.
    A negatively acknowledged entry comes again when the broker gets to it (Pulsar gives
    it no place in the order), so it is never owed;
  * the client asks for a nacked entry again once per nack delay in which messages of it
    were nacked, and the broker takes back whatever copy the consumer then holds (Pulsar
    does too: a request names ledger and entry, not which copy): a copy that came again
    to the consumer that nacked the entry at several times may be taken back by a later
    request before the application sees it. Such a copy is not held, and may reach the
    application while another consumer holds the key;
  * no entry of a key reaches a consumer while another consumer holds one of that key
    unacknowledged: a key moves to a consumer that joins only once its previous holder
    acknowledged what it had of it.
- No stall: the longest time nothing reached any application while a message could have
  (published, not acknowledged, held by no application and, on Key_Shared, of a key no
  application holds an entry of), leaving out the restart window (from the pause before
  it until every client reconnected) and the time the broker's loop, or a thread of the
  test process, spent waiting for a CPU (`RunQueueWait`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from dataclasses import dataclass, field

from sortedcontainers import SortedList
from traffic import Entry, Event, RunQueueWait, Timeline

Unit = tuple[int, str]
"""What Key_Shared orders by: (partition, sticky key)."""

STALL_LIMIT_S = 1.0


@dataclass
class Verdict:
    problems: list[str] = field(default_factory=list)
    stalls: list[tuple[float, float, float]] = field(default_factory=list)  # (start, wall, unexplained)

    @property
    def longest_stall(self) -> float:
        return max((unexplained for _, _, unexplained in self.stalls), default=0.0)


def events_until_finished(timeline: Timeline) -> list[Event]:
    events = []
    for event in timeline.events:
        events.append(event)
        if event.kind in ("finished", "gave-up"):
            break
    return events


class Layout:
    """Which entry each message is in and the key each entry goes by, from the send receipts
    and from what consumers received (an entry written twice, its receipt lost to SIGKILL,
    shows up only there)."""

    def __init__(self, events: list[Event]) -> None:
        self.entry_of: dict[int, Entry] = {}
        counts: dict[Entry, set[int]] = defaultdict(set)
        self.sticky: dict[Entry, str] = {}
        for event in events:
            if event.kind not in ("published", "delivered"):
                continue
            if event.kind == "published":
                self.entry_of[event.value] = event.entry
            counts[event.entry].add(event.index)
            if event.index <= 0:
                self.sticky[event.entry] = event.key
        self.size = {entry: max(len(indexes), max(indexes) + 1) for entry, indexes in counts.items()}
        self.by_unit: dict[Unit, list[Entry]] = defaultdict(list)
        for entry in sorted(self.sticky):
            self.by_unit[self.unit(entry)].append(entry)

    def unit(self, entry: Entry) -> Unit:
        return entry[0], self.sticky[entry]

    def earlier(self, entry: Entry) -> list[Entry]:
        entries = self.by_unit[self.unit(entry)]
        return entries[:bisect_left(entries, entry)]


class Holdings:
    """What each application holds unacknowledged, per entry, since the broker last started.

    The client acknowledges a batch once every message of one delivery of it was
    acknowledged; an entry one of whose deliveries was acknowledged so (by anyone, since
    the broker started: it may have lost older acknowledgements) is done. An application
    holds an entry from its latest delivery of it until that delivery is acknowledged or
    negatively acknowledged, or the entry is done, unless that delivery may have been taken back.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.latest: dict[str, dict[Entry, tuple[int, int]]] = defaultdict(dict)
        self.acked: dict[tuple[str, Entry, tuple[int, int]], set[int]] = defaultdict(set)
        self.nacked: set[tuple[str, Entry, tuple[int, int]]] = set()
        self.requests: dict[tuple[str, Entry], int] = defaultdict(int)  # nacks beyond a delivery's first
        self.taken_back: set[tuple[str, Entry, tuple[int, int]]] = set()
        self.done: set[Entry] = set()
        self.holders: dict[Unit, dict[Entry, set[str]]] = defaultdict(lambda: defaultdict(set))

    def held(self, consumer: str, entry: Entry) -> bool:
        delivery = self.latest[consumer].get(entry)
        return (delivery is not None and entry not in self.done and (consumer, entry, delivery) not in self.nacked
                and (consumer, entry, delivery) not in self.taken_back)

    def _update(self, consumer: str, entry: Entry) -> None:
        holders = self.holders[self.layout.unit(entry)]
        if self.held(consumer, entry):
            holders[entry].add(consumer)
        elif entry in holders:
            holders[entry].discard(consumer)
            if not holders[entry]:
                del holders[entry]

    def received(self, event: Event) -> None:
        """A later copy of an entry its consumer nacked more than once may be taken back by a
        redelivery request still to come (each request takes back one copy)."""
        delivery = (event.consumer, event.entry, event.delivery)
        if self.latest[event.consumer].get(event.entry) != event.delivery and self.requests[delivery[:2]] > 0:
            self.requests[delivery[:2]] -= 1
            self.taken_back.add(delivery)
        self.latest[event.consumer][event.entry] = event.delivery
        self._update(event.consumer, event.entry)

    def ack(self, event: Event) -> None:
        indexes = self.acked[event.consumer, event.entry, event.delivery]
        indexes.add(event.index)
        if len(indexes) >= self.layout.size[event.entry]:
            self.done.add(event.entry)
            for consumer in list(self.holders[self.layout.unit(event.entry)].get(event.entry, ())):
                self._update(consumer, event.entry)

    def nack(self, event: Event) -> None:
        """Each nack after a delivery's first may bring one more redelivery request (the client
        groups nacks by when they are due, not by entry)."""
        delivery = (event.consumer, event.entry, event.delivery)
        if delivery in self.nacked:
            self.requests[delivery[:2]] += 1
        self.nacked.add(delivery)
        self._update(event.consumer, event.entry)

    def restarted(self) -> list[Entry]:
        """The broker went down: what anyone held comes again, and so may what was done."""
        released = [entry for consumer in list(self.latest) for entry in self.release(consumer)]
        self.done.clear()
        return released

    def release(self, consumer: str) -> list[Entry]:
        """The consumer is gone (left, or the broker restarted): what it held comes again."""
        released = [entry for entry in self.latest.get(consumer, {}) if self.held(consumer, entry)]
        for entry in self.latest.pop(consumer, {}):
            holders = self.holders[self.layout.unit(entry)]
            if entry in holders:
                holders[entry].discard(consumer)
                if not holders[entry]:
                    del holders[entry]
        return released

    def other_holders(self, consumer: str, unit: Unit) -> set[str]:
        return {c for consumers in self.holders[unit].values() for c in consumers} - {consumer}

    def holds(self, unit: Unit) -> bool:
        return bool(self.holders.get(unit))


class Waiting:
    """Messages that could be delivered now, per unit: published, not acknowledged, held by no
    application; on Key_Shared only those of keys no application holds an entry of. (A
    key's owner gets more of it while holding some, but which consumer owns a key is the
    broker's business: the measure leaves such keys out rather than guess.)"""

    def __init__(self, layout: Layout, holdings: Holdings, ordered: bool) -> None:
        self.layout, self.holdings, self.ordered = layout, holdings, ordered
        self.acked: set[int] = set()
        self.receivers: dict[int, set[str]] = defaultdict(set)  # value -> applications holding it
        self.waiting: dict[Unit, SortedList] = defaultdict(SortedList)  # (entry, value)
        self.open: set[Unit] = set()

    def _unit(self, value: int) -> Unit | None:
        entry = self.layout.entry_of.get(value)
        return self.layout.unit(entry) if entry in self.layout.sticky else None

    def refresh(self, unit: Unit) -> None:
        if self.waiting[unit] and not (self.ordered and self.holdings.holds(unit)):
            self.open.add(unit)
        else:
            self.open.discard(unit)

    def _set(self, value: int, waits: bool) -> Unit | None:
        unit = self._unit(value)
        if unit is None:
            return None
        item = (self.layout.entry_of[value], value)
        if waits and value not in self.acked and not self.receivers[value]:
            if item not in self.waiting[unit]:
                self.waiting[unit].add(item)
        else:
            self.waiting[unit].discard(item)
        return unit

    def published(self, value: int) -> None:
        self._touch(self._set(value, True))

    def delivered(self, value: int, consumer: str) -> None:
        self.receivers[value].add(consumer)
        self._touch(self._set(value, False))

    def acked_by(self, value: int) -> None:
        self.acked.add(value)
        self._touch(self._set(value, False))

    def dropped(self, value: int, consumer: str) -> None:
        self.receivers[value].discard(consumer)
        self._touch(self._set(value, True))

    def release(self, consumer: str) -> None:
        for value, receivers in self.receivers.items():
            if consumer in receivers:
                self.dropped(value, consumer)

    def _touch(self, unit: Unit | None) -> None:
        if unit is not None:
            self.refresh(unit)


class Judge:
    def __init__(self, timeline: Timeline, waits: RunQueueWait, ordered: bool) -> None:
        self.events = events_until_finished(timeline)
        self.layout = Layout(self.events)
        self.holdings = Holdings(self.layout)
        self.waiting = Waiting(self.layout, self.holdings, ordered)
        self.waits, self.ordered = waits, ordered
        self.verdict = Verdict()
        self.first_seen: set[Entry] = set()
        self.owed: set[Entry] = set()
        self._since: float | None = None
        self._paused = False

    def run(self, timeline: Timeline) -> Verdict:
        for event in self.events:
            getattr(self, f"on_{event.kind.replace('-', '_')}")(event)
            self._account(event)
        if self.events:
            self._close(self.events[-1].at)
        self._at_least_once(timeline)
        return self.verdict

    # -- events
    def on_published(self, event: Event) -> None:
        self.waiting.published(event.value)

    def on_delivered(self, event: Event) -> None:
        entry, consumer = event.entry, event.consumer
        self.holdings.received(event)  # first: it tells whether this copy may be taken back
        if self.ordered and entry in self.layout.sticky:
            self._check_order(event)
        self.first_seen.add(entry)
        self.owed.discard(entry)
        self.waiting.delivered(event.value, consumer)
        self._refresh(entry)

    def on_acked(self, event: Event) -> None:
        self.owed.discard(event.entry)
        self.holdings.ack(event)
        self.waiting.acked_by(event.value)
        self._refresh(event.entry)

    def on_nacked(self, event: Event) -> None:
        self.holdings.nack(event)
        self.waiting.dropped(event.value, event.consumer)
        self._refresh(event.entry)

    def on_left(self, event: Event) -> None:
        self.owed.update(self.holdings.release(event.consumer))
        self.waiting.release(event.consumer)
        self._refresh_all()

    def on_restarted(self, _event: Event) -> None:
        consumers = list(self.holdings.latest)
        self.owed.update(self.holdings.restarted())
        for consumer in consumers:
            self.waiting.release(consumer)
        self._refresh_all()

    def on_joined(self, _event: Event) -> None:
        pass

    def on_paused(self, event: Event) -> None:
        self._close(event.at)
        self._paused = True

    def on_resumed(self, _event: Event) -> None:
        self._paused = False

    def on_finished(self, _event: Event) -> None:
        pass

    def on_gave_up(self, _event: Event) -> None:
        self.verdict.problems.append("the run did not finish: messages were still unacknowledged at its deadline")

    def _refresh(self, entry: Entry) -> None:
        if entry in self.layout.sticky:
            self.waiting.refresh(self.layout.unit(entry))

    def _refresh_all(self) -> None:
        for unit in list(self.waiting.waiting):
            self.waiting.refresh(unit)

    # -- order
    def _check_order(self, event: Event) -> None:
        entry, consumer = event.entry, event.consumer
        unit = self.layout.unit(entry)
        where = f"entry {entry} of key {unit[1]!r} (value {event.value}) reached {consumer}"
        if entry not in self.first_seen:
            earlier = self.layout.earlier(entry)
            unseen = [e for e in earlier if e not in self.first_seen]
            owed = [e for e in earlier if e in self.owed]
            if unseen:
                self.verdict.problems.append(f"{where} before earlier entries of its key: {unseen[:3]}")
            if owed:
                self.verdict.problems.append(f"{where} before earlier ones that had to come again: {owed[:3]}")
        others = self.holdings.other_holders(consumer, unit)
        maybe_taken_back = (consumer, entry, event.delivery) in self.holdings.taken_back
        if others and entry not in self.holdings.done and not maybe_taken_back:  # done: a copy the client still had
            self.verdict.problems.append(f"{where} while {sorted(others)} held entries of that key unacknowledged")

    # -- stalls
    def _account(self, event: Event) -> None:
        if self._paused:
            return
        if event.kind == "delivered":
            self._close(event.at)
        if self.waiting.open:
            if self._since is None:
                self._since = event.at
        else:
            self._close(event.at)

    def _close(self, end: float) -> None:
        if self._since is None:
            return
        start, self._since = self._since, None
        wall = end - start
        if wall > 0.2:
            self.verdict.stalls.append((start, wall, wall - self.waits.between(start, end)))

    # -- at least once
    def _at_least_once(self, timeline: Timeline) -> None:
        missing = sorted(timeline.published - timeline.received)
        if missing:
            self.verdict.problems.append(f"{len(missing)} sent messages never received, e.g. {missing[:10]}")
        unacked = sorted(timeline.published - timeline.acked)
        if unacked:
            self.verdict.problems.append(f"{len(unacked)} sent messages never acknowledged, e.g. {unacked[:10]}")


def judge(timeline: Timeline, waits: RunQueueWait, *, ordered: bool) -> Verdict:
    return Judge(timeline, waits, ordered).run(timeline)


def report(verdict: Verdict, scenario: object, timeline: Timeline) -> str:
    """What a failure message says: the scenario (with its seed), the problems, the longest gaps."""
    start = timeline.events[0].at if timeline.events else 0.0
    gaps = sorted(verdict.stalls, key=lambda stall: -stall[2])[:5]
    lines = [str(scenario), *verdict.problems[:15]]
    lines += [f"no delivery for {wall:.2f} s from t={at - start:.2f} s ({unexplained:.2f} s not explained by "
              f"waiting for a CPU)" for at, wall, unexplained in gaps]
    return "\n".join(lines)
