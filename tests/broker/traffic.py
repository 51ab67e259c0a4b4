"""Consumers of one subscription under disruption, driven the way applications drive them.

A `Run` keeps two to four consumers of one subscription busy while a producer publishes.
Each consumer receives in a thread of its own and acknowledges at once, a little later,
much later, or negatively; consumers join and leave partway, and the broker is restarted
(SIGTERM) or killed (SIGKILL) once. Everything the applications see goes into one
`Timeline`, in the order it happened in this process, and `judge` replays it afterwards
against what Pulsar promises (see there).

A scenario is drawn from a seed, and every failure names it; `MAGNETAR_TRAFFIC_SEEDS=1,2`
replays chosen seeds instead of the fixed ones and the fresh one each run adds.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pulsar
from polling import wait_for
from seeds import fresh_seed
from standalone import Standalone

Entry = tuple[int, int, int]
"""A stored entry as consumers see it: (partition, ledger id, entry id)."""

RECEIVE_TIMEOUT_MS = 50
NACK_DELAY_MS = 100
MIN_CONSUMERS, MAX_CONSUMERS = 2, 4
SAMPLE_INTERVAL_S = 0.02


def seeds(fixed: list[int]) -> list[int]:
    """The fixed seeds and one fresh one, or the seeds MAGNETAR_TRAFFIC_SEEDS names."""
    chosen = os.environ.get("MAGNETAR_TRAFFIC_SEEDS")
    if chosen:
        return [int(seed) for seed in chosen.split(",")]
    return [*fixed, fresh_seed()]


@dataclass(frozen=True)
class Event:
    """One thing an application saw or did. Acks, nacks and leaving are recorded before the
    client is told, deliveries after `receive` returned: so the timeline never shows a
    message released later, or received earlier, than the broker could have seen it."""

    at: float
    kind: str  # published delivered acked nacked joined left paused restarted resumed finished gave-up
    consumer: str = ""
    value: int = -1
    key: str = ""
    entry: Entry = (-1, -1, -1)
    index: int = -1
    delivery: tuple[int, int] = (0, 0)
    """Which delivery of the entry a message came in: (broker lifetime, redelivery count). The
    client acknowledges a batch once every message of one delivery of it was acknowledged."""


class Timeline:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[Event] = []
        self.published: set[int] = set()
        self.received: set[int] = set()
        self.acked: set[int] = set()
        self.send_failures: list[str] = []
        self.epoch = 0  # broker lifetimes: the run counts one more when clients have reconnected

    def record(self, kind: str, **fields: object) -> None:
        with self._lock:
            event = Event(time.monotonic(), kind, **fields)  # type: ignore[arg-type]
            self.events.append(event)
            {"published": self.published, "delivered": self.received, "acked": self.acked}.get(
                kind, set()).add(event.value)

    def message(self, kind: str, consumer: str, msg: pulsar.Message, delivery: tuple[int, int]) -> None:
        key, _, value = msg.data().decode().rpartition(":")
        mid = msg.message_id()
        self.record(kind, consumer=consumer, value=int(value), key=key, delivery=delivery,
                    entry=(mid.partition(), mid.ledger_id(), mid.entry_id()), index=mid.batch_index())

    def done(self) -> bool:
        with self._lock:
            return self.published <= self.acked


@dataclass(frozen=True)
class Habits:
    """How one application treats what it receives."""

    queue_size: int
    nack: float  # share of first deliveries negatively acknowledged
    hold: float  # share acknowledged 50-300 ms later
    long_hold: float  # share acknowledged 1-2.5 s later (a slow downstream write)
    pause: float  # share followed by up to 20 ms of work

    @classmethod
    def draw(cls, rng: random.Random) -> Habits:
        return cls(queue_size=rng.choice([10, 100, 1000]), nack=rng.choice([0.0, 0.02]),
                   hold=rng.choice([0.0, 0.1, 0.3]), long_hold=rng.choice([0.0, 0.002, 0.01]),
                   pause=rng.choice([0.0, 0.05]))


class Worker(threading.Thread):
    """One application: receive, acknowledge by its habits; pause, resume and leave on request."""

    def __init__(self, name: str, consumer: pulsar.Consumer, timeline: Timeline, habits: Habits,
                 rng: random.Random) -> None:
        super().__init__(name=f"consumer-{name}", daemon=True)
        self.consumer_name, self.consumer, self.timeline, self.habits, self.rng = name, consumer, timeline, habits, rng
        self.held: list[tuple[float, pulsar.Message, tuple[int, int]]] = []
        self.error: BaseException | None = None
        self._pause, self._parked, self._resume = threading.Event(), threading.Event(), threading.Event()
        self._leave, self._stopping = threading.Event(), threading.Event()
        self._drain, self._drained = threading.Event(), threading.Event()

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                if self._pause.is_set():
                    self._park()
                elif self._leave.is_set():
                    self.timeline.record("left", consumer=self.consumer_name)
                    self.consumer.close()  # what it held unacknowledged goes to the others
                    return
                else:
                    self._ack_due()
                    self._receive_one()
            self._ack_due(everything=True)
        except BaseException as exc:  # surfaced by the test, not lost in the thread
            self.error = exc

    def _receive_one(self) -> None:
        try:
            msg = self.consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        except pulsar.Timeout:
            return
        delivery = (self.timeline.epoch, msg.redelivery_count())
        self.timeline.message("delivered", self.consumer_name, msg, delivery)
        habits, draw = self.habits, self.rng.random()
        if draw < habits.nack and msg.redelivery_count() == 0:
            self.timeline.message("nacked", self.consumer_name, msg, delivery)
            self.consumer.negative_acknowledge(msg)
        elif draw < habits.nack + habits.long_hold:
            self.held.append((time.monotonic() + self.rng.uniform(1.0, 2.5), msg, delivery))
        elif draw < habits.nack + habits.long_hold + habits.hold:
            self.held.append((time.monotonic() + self.rng.uniform(0.05, 0.3), msg, delivery))
        else:
            self._ack(msg, delivery)
        if self.rng.random() < habits.pause:
            self._stopping.wait(self.rng.uniform(0, 0.02))  # the application's own work

    def _ack(self, msg: pulsar.Message, delivery: tuple[int, int]) -> None:
        self.timeline.message("acked", self.consumer_name, msg, delivery)
        self.consumer.acknowledge(msg)

    def _ack_due(self, everything: bool = False) -> None:
        now = time.monotonic()
        due = [(msg, delivery) for at, msg, delivery in self.held if everything or at <= now]
        self.held = [held for held in self.held if not (everything or held[0] <= now)]
        for msg, delivery in due:
            self._ack(msg, delivery)

    def _park(self) -> None:
        self._parked.set()
        while not self._resume.wait(0.01):
            if self._drain.is_set():
                self._drop_buffered()
                self._drain.clear()
                self._drained.set()
        self._resume.clear()
        self._pause.clear()
        self._parked.clear()

    def _drop_buffered(self) -> None:
        """What the client buffered from a broker that is gone is dropped unseen: a consumer
        of one topic clears its queue when it reconnects, but a consumer of a partitioned
        topic keeps what its shared queue held, and would hand it over after messages the
        new broker sent again (the broker sends all of it again anyway)."""
        while True:
            try:
                self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                return

    def pause(self) -> None:
        self._pause.set()
        assert self._parked.wait(10), f"{self.consumer_name} did not pause"

    def drop_buffered(self) -> None:
        self._drain.set()

    def wait_dropped(self) -> None:
        assert self._drained.wait(30), f"{self.consumer_name} did not empty its queue"
        self._drained.clear()

    def resume(self) -> None:
        self._resume.set()

    def leave(self) -> None:
        self._leave.set()
        self.join(timeout=15)

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=15)
        self.consumer.close()


class RunQueueWait(threading.Thread):
    """Seconds the broker's event loop, and the busiest thread of this process, spent ready to
    run but waiting for a CPU (the second field of /proc/<pid>/task/<tid>/schedstat).

    On a loaded machine a delivery can be late only because nobody got a CPU; such time
    is not a stall, and `judge` takes it off every gap it measures. A stalled dispatcher
    waits for an event that does not come: its loop sleeps, which costs no run-queue time.
    """

    def __init__(self, broker: Standalone) -> None:
        super().__init__(name="run-queue-wait", daemon=True)
        self.broker = broker
        self.samples: list[tuple[float, float]] = []
        self._stopping = threading.Event()
        self._last: dict[tuple[int, int], int] = {}
        self._total = 0.0

    def run(self) -> None:
        while not self._stopping.wait(SAMPLE_INTERVAL_S):
            self._sample()

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=5)

    def _sample(self) -> None:
        proc = self.broker.proc
        broker_wait = self._delta(proc.pid, [proc.pid]) if proc is not None else 0
        own = [int(tid) for tid in os.listdir("/proc/self/task")]
        own_wait = max((self._delta(os.getpid(), [tid]) for tid in own), default=0)
        self._total += (broker_wait + own_wait) / 1e9
        self.samples.append((time.monotonic(), self._total))

    def _delta(self, pid: int, tids: list[int]) -> int:
        waited = 0
        for tid in tids:
            try:
                now = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
            waited += now - self._last.get((pid, tid), now)
            self._last[pid, tid] = now
        return waited

    def between(self, start: float, end: float) -> float:
        """Waiting accumulated from the last sample before `start` to the first after `end`."""
        before = [total for at, total in self.samples if at <= start]
        after = [total for at, total in self.samples if at >= end]
        first = before[-1] if before else 0.0
        last = after[0] if after else (self.samples[-1][1] if self.samples else 0.0)
        return max(0.0, last - first)


def backlog(broker: Standalone, topic: str, partitions: int, subscription: str) -> int:
    names = [f"{topic}-partition-{n}" for n in range(partitions)] if partitions else [topic]
    total = 0
    for name in names:
        url = f"{broker.admin_url}/admin/v2/persistent/public/default/{name}/stats"
        with urllib.request.urlopen(url, timeout=10) as response:
            total += json.load(response)["subscriptions"][subscription]["msgBacklog"]
    return total


def create_partitioned(broker: Standalone, topic: str, partitions: int) -> None:
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/partitions"
    request = urllib.request.Request(url, data=str(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10):
        pass


@dataclass(frozen=True)
class Scenario:
    """One run, drawn from its seed: who is there, what the producer sends, what happens when."""

    seed: int
    sub_type: pulsar.ConsumerType
    batching: str  # "default" | "key_based"
    partitions: int  # 0: a topic without partitions
    messages: int
    keys: int
    consumers: int  # at the start
    actions: tuple[tuple[float, str], ...]  # (share of messages published, join | leave | restart | kill)
    ordered: bool  # Key_Shared: judge per-key order

    @property
    def topic(self) -> str:
        kind = "ks" if self.ordered else "shared"
        return f"traffic-{kind}-{self.batching}-{self.partitions}p-{self.seed}"

    def __str__(self) -> str:
        kind = "Key_Shared" if self.ordered else "Shared"
        return (f"seed {self.seed}: {kind}, {self.messages} messages, {self.keys} keys, {self.batching} batching, "
                f"{self.partitions} partitions, {self.consumers} consumers, then {list(self.actions)} "
                f"(replay with MAGNETAR_TRAFFIC_SEEDS={self.seed})")


def draw_actions(rng: random.Random, consumers: int, disruption: str, steps: int) -> tuple[tuple[float, str], ...]:
    """Joins and leaves keeping 2-4 consumers, at random points, and the disruption halfway."""
    actions, live = [], consumers
    points = sorted(rng.uniform(0.05, 0.95) for _ in range(steps))
    for point in points:
        choice = rng.choice([a for a, ok in (("join", live < MAX_CONSUMERS), ("leave", live > MIN_CONSUMERS)) if ok])
        live += 1 if choice == "join" else -1
        actions.append((point, choice))
    actions.append((0.5, disruption))
    return tuple(sorted(actions))


class Run:
    """Drive one scenario against a broker and return what the applications saw."""

    def __init__(self, broker: Standalone, scenario: Scenario) -> None:
        self.broker, self.sc = broker, scenario
        self.rng = random.Random(scenario.seed)
        self.timeline = Timeline()
        self.client = pulsar.Client(broker.url, operation_timeout_seconds=30,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        self.workers: list[Worker] = []
        self.gone: list[Worker] = []
        self._numbers = iter(range(1_000))

    def execute(self, deadline_s: float = 60.0) -> tuple[Timeline, RunQueueWait]:
        sc = self.sc
        if sc.partitions:
            create_partitioned(self.broker, sc.topic, sc.partitions)
        waits = RunQueueWait(self.broker)
        waits.start()
        try:
            for _ in range(sc.consumers):
                self.join()
            producer = threading.Thread(target=self._produce, name="producer", daemon=True)
            producer.start()
            for share, action in sc.actions:
                wait_for(lambda share=share: len(self.timeline.published) >= share * sc.messages, timeout=deadline_s)
                getattr(self, action)()
            producer.join(timeout=deadline_s)
            assert not producer.is_alive(), f"{sc}: the producer did not finish"
            assert not self.timeline.send_failures, f"{sc}: sends failed: {self.timeline.send_failures[:5]}"
            finished = wait_for(lambda: self.timeline.done() and self._backlog() == 0, timeout=deadline_s, interval=0.1)
            self.timeline.record("finished" if finished else "gave-up")
        finally:
            waits.stop()
            self._stop_all()
        return self.timeline, waits

    # -- actions
    def join(self) -> None:
        name = f"c{next(self._numbers)}"
        habits = Habits.draw(self.rng)
        consumer = self.client.subscribe(
            f"persistent://public/default/{self.sc.topic}", "sub", consumer_type=self.sc.sub_type,
            consumer_name=name, receiver_queue_size=habits.queue_size, initial_position=pulsar.InitialPosition.Earliest,
            negative_ack_redelivery_delay_ms=NACK_DELAY_MS)
        self.timeline.record("joined", consumer=name)
        worker = Worker(name, consumer, self.timeline, habits, random.Random(f"{self.sc.seed}/{name}"))
        self.workers.append(worker)
        worker.start()

    def leave(self) -> None:
        worker = self.workers.pop(self.rng.randrange(len(self.workers)))
        worker.leave()
        self.gone.append(worker)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        """Applications pause, so that what they received from the broker before it went down is
        told apart from what the new one sends; while it is down they drop what their clients
        still buffered, and they resume once every client reconnected."""
        self.timeline.record("paused")
        for worker in self.workers:
            worker.pause()
        self.timeline.record("restarted")
        self.broker.stop(sig)
        for worker in self.workers:
            worker.drop_buffered()
        for worker in self.workers:
            worker.wait_dropped()
        self.broker.start()
        reconnected = wait_for(lambda: all(w.consumer.is_connected() for w in self.workers), timeout=60)
        assert reconnected, f"{self.sc}: consumers did not reconnect after the restart"
        self.timeline.epoch += 1
        self.timeline.record("resumed")
        for worker in self.workers:
            worker.resume()

    def kill(self) -> None:
        self.restart(signal.SIGKILL)

    # -- the producer
    def _produce(self) -> None:
        try:
            self._publish_all()
        except BaseException as exc:  # surfaced by the test, not lost in the thread
            self.timeline.send_failures.append(f"the producer failed: {exc!r}")

    def _publish_all(self) -> None:
        sc, rng = self.sc, random.Random(f"{self.sc.seed}/producer")
        options: dict[str, object] = {"batching_enabled": True, "block_if_queue_full": True,
                                      "batching_type": {"default": pulsar.BatchingType.Default,
                                                        "key_based": pulsar.BatchingType.KeyBased}[sc.batching]}
        producer = self.client.create_producer(f"persistent://public/default/{sc.topic}", **options)
        lead = rng.choice([100, 300, 1000])
        start = 0
        while start < sc.messages:
            # keep at most `lead` messages ahead of the consumers, so the actions fall amid traffic
            wait_for(lambda: len(self.timeline.received) >= len(self.timeline.published) - lead, timeout=10)
            end = min(sc.messages, start + rng.randint(20, 120))
            for value in range(start, end):
                key = f"k{rng.randrange(sc.keys)}"
                producer.send_async(f"{key}:{value}".encode(), self._receipt(key, value), partition_key=key)
            producer.flush()
            start = end
        producer.close()

    def _receipt(self, key: str, value: int):
        def sent(result: pulsar.Result, mid: pulsar.MessageId) -> None:
            if result != pulsar.Result.Ok:
                self.timeline.send_failures.append(f"{value}: {result}")
                return
            self.timeline.record("published", value=value, key=key,
                                 entry=(mid.partition(), mid.ledger_id(), mid.entry_id()), index=mid.batch_index())
        return sent

    def _backlog(self) -> int:
        return backlog(self.broker, self.sc.topic, self.sc.partitions, "sub")

    def _stop_all(self) -> None:
        for worker in self.workers:
            worker.stop()
        errors = [f"{w.consumer_name}: {w.error!r}" for w in [*self.workers, *self.gone] if w.error is not None]
        self.client.close()
        assert not errors, f"{self.sc}: {errors}"
