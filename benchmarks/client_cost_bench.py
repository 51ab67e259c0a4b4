"""CPU per message of a client process, magnetar.client beside the official pulsar-client, in one run.

    .venv/bin/python benchmarks/client_cost_bench.py [--rate 10000] [--seconds 5] [--rounds 2] [--profile DIR]

Why CPU and not time: the clients share the machine's cores with the broker, so what one
costs per message is taken from the broker; CPU seconds of the client process (every thread:
the official client's C++ I/O threads too) divided by messages hardly moves with the load,
where throughput and latency do. 100-byte messages, one `magnetar standalone`
(journalSyncData=false), each run in its own process, the order of the clients alternating
between rounds. Workloads:

- send_unbatched_at_rate / send_batched_at_rate: an open-loop producer at `--rate` msg/s for
  `--seconds` (as latency_bench drives it), send_async with a real callback on every tenth
  message, batching off / on at the clients' default limits (1000 messages, 128 KiB, 10 ms);
- send_unbatched_flat_out / send_batched_flat_out: as fast as send_async takes them
  (client_bench's produce runs; a callback on every message);
- receive_ack_at_rate: receive() + acknowledge() per message while another process publishes
  at `--rate` msg/s, unbatched (what a consumer costs at that rate);
- receive_ack_timeout_at_rate: the same with unacked_messages_timeout_ms=10000, so that every
  ack also goes to the unacked-message tracking;
- receive_ack_flat_out: receive() + acknowledge() of a topic filled beforehand (client_bench's).

Prints one JSON object: per workload and client, CPU microseconds per message (the median of
the rounds, and every round), msg/s, the ratio magnetar / official, and for magnetar.client's
at-rate sends the polls of its I/O loop a message (a loop turn each, counted by wrapping the
selector: about 0.1 µs a poll more for both magnetar trees); plus the load average
before and after. With --profile DIR, py-spy records the magnetar runs (flame graphs in DIR).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _latency_drivers import open_loop
from client_bench import PAYLOAD, fill, in_process, make_client, outcome, spy_on
from client_bench import run_consume as _run_consume
from client_bench import run_produce as _run_produce

WORKLOADS = ("send_unbatched_at_rate", "send_batched_at_rate", "send_unbatched_flat_out", "send_batched_flat_out",
             "receive_ack_at_rate", "receive_ack_timeout_at_rate", "receive_ack_flat_out")

EVERY = 10
"""A real callback on every tenth message (None on the others): the issue's lighter setting."""


class Measure:
    """CPU (user and system apart), context switches and wall time of this process over a run."""

    def __init__(self) -> None:
        self._usage = resource.getrusage(resource.RUSAGE_SELF)
        self._t0 = time.perf_counter()

    def per_message(self, count: int) -> dict:
        wall = time.perf_counter() - self._t0
        before, after = self._usage, resource.getrusage(resource.RUSAGE_SELF)
        user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
        switches = after.ru_nvcsw - before.ru_nvcsw + after.ru_nivcsw - before.ru_nivcsw
        return {"cpu_us_per_msg": round((user + system) / count * 1e6, 2),
                "user_us_per_msg": round(user / count * 1e6, 2), "sys_us_per_msg": round(system / count * 1e6, 2),
                "switches_per_msg": round(switches / count, 2), "msg_per_s": round(count / wall), "messages": count}


def count_polls(client: Any) -> list[int] | None:
    """Count the polls of magnetar.client's I/O loop (a loop turn each) from now on; None for
    the official client, or a loop whose selector cannot be wrapped (uvloop's)."""
    selector = getattr(getattr(getattr(client, "_io", None), "loop", None), "_selector", None)
    if selector is None:
        return None
    polls = [0]
    select = selector.select

    def counted(timeout: float | None = None) -> Any:
        polls[0] += 1
        return select(timeout)

    selector.select = counted
    return polls


def run_send_at_rate(kind: str, url: str, topic: str, rate: int, seconds: float, batched: bool) -> dict:
    client = make_client(kind, url)
    producer = client.create_producer(topic, batching_enabled=batched, block_if_queue_full=True,
                                      max_pending_messages=5000, send_timeout_millis=60_000)
    producer.send(PAYLOAD)  # connection and first round trip outside the measure
    polls = count_polls(client)
    count = int(rate * seconds)
    answered = [0]
    in_batches = [0]

    def callback(_result: Any, message_id: Any) -> None:
        answered[0] += 1
        in_batches[0] += message_id.batch_index() >= 0

    send_async = producer.send_async

    def send(index: int, _due: int) -> None:
        send_async(PAYLOAD, callback if index % EVERY == 0 else None)

    measure = Measure()
    open_loop(send, rate, count)
    producer.flush()
    result = measure.per_message(count)
    if polls is not None:
        result["loop_polls_per_msg"] = round(polls[0] / count, 2)
    client.close()
    if answered[0] != len(range(0, count, EVERY)):
        raise RuntimeError(f"{kind}: {answered[0]} callbacks of {len(range(0, count, EVERY))}")
    result["batched_share"] = round(in_batches[0] / answered[0], 2)  # of the messages with a callback
    return result


def run_send_flat_out(kind: str, url: str, topic: str, count: int, batched: bool) -> dict:
    result = _run_produce(kind, url, topic, count, batched, True)
    return {"cpu_us_per_msg": result["cpu_s_per_million"], "msg_per_s": result["msg_per_s"], "messages": count}


def run_receive_flat_out(kind: str, url: str, topic: str, count: int) -> dict:
    result = _run_consume(kind, url, topic, count)
    return {"cpu_us_per_msg": result["cpu_s_per_million"], "msg_per_s": result["msg_per_s"], "messages": count - 1}


def use_tree(src: str | None) -> None:
    """Import magnetar from `src` in this (child) process: the --baseline client."""
    if src:
        sys.path.insert(0, src)
        for name in [name for name in sys.modules if name == "magnetar" or name.startswith("magnetar.")]:
            del sys.modules[name]


def in_tree(src: str | None, fn: Any, *args: Any) -> dict:
    use_tree(src)
    return fn(*args)


def _consume_at_rate(queue: mp.Queue, src: str | None, kind: str, url: str, topic: str, count: int,
                     options: dict) -> None:
    try:
        use_tree(src)
        client = make_client(kind, url)
        module: Any
        if kind == "official":
            import pulsar as module  # noqa: PLC0415
        else:
            import magnetar.client as module  # noqa: PLC0415
        consumer = client.subscribe(topic, "cost", consumer_type=module.ConsumerType.Exclusive, **options)
        queue.put(("ready", None))
        consumer.acknowledge(consumer.receive(60_000))  # the clock starts with the first message
        measure = Measure()
        receive, acknowledge = consumer.receive, consumer.acknowledge
        for _ in range(count - 1):
            acknowledge(receive(60_000))
        result = measure.per_message(count - 1)
        client.close()
        queue.put(("ok", result))
    except BaseException as exc:
        queue.put(("error", repr(exc)))


def publish_at_rate(url: str, topic: str, rate: int, count: int) -> dict:
    """The official client publishing unbatched at `rate` (the consumer's traffic)."""
    client = make_client("official", url)
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True,
                                      max_pending_messages=5000, send_timeout_millis=60_000)
    open_loop(lambda _i, _due: producer.send_async(PAYLOAD, None), rate, count)
    producer.flush()
    client.close()
    return {}


def run_receive_at_rate(src: str | None, kind: str, url: str, rate: int, seconds: float,
                        profile: Path | None, options: dict, label: str) -> dict:
    topic = _topic()
    count = int(rate * seconds)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    consumer = ctx.Process(target=_consume_at_rate, args=(queue, src, kind, url, topic, count, options))
    consumer.start()
    status, detail = queue.get(timeout=120)
    if status != "ready":
        raise RuntimeError(f"{label} {kind}: {detail}")
    spy = spy_on(profile, label, consumer.pid)
    in_process(publish_at_rate, url, topic, rate, count)
    return outcome(queue, consumer, spy, f"{label} {kind}")


def _topic() -> str:
    return f"persistent://public/default/cost-{uuid.uuid4().hex[:8]}"


def one_round(clients: list[tuple[str, str, str | None]], url: str, args: argparse.Namespace) -> dict[str, dict]:
    """Every workload once per client (label, kind, magnetar source tree), the clients taking
    turns within each workload so that a change of load weighs on all of them."""
    out: dict[str, dict[str, dict]] = {}
    flat = int(args.rate * args.seconds)
    for workload in args.workloads:
        for label, kind, src in clients:
            profile = args.profile if label == "magnetar" else None
            if workload.startswith("receive_ack_") and workload.endswith("_at_rate"):
                options = {"unacked_messages_timeout_ms": 10_000} if "_timeout_" in workload else {}
                result = run_receive_at_rate(src, kind, url, args.rate, args.seconds, profile, options, workload)
            elif workload == "receive_ack_flat_out":
                filled = _topic()
                fill(url, filled, flat * 4)
                result = in_process(in_tree, src, run_receive_flat_out, kind, url, filled, flat * 4,
                                    profile=profile, label=workload)
            elif workload.endswith("_at_rate"):
                result = in_process(in_tree, src, run_send_at_rate, kind, url, _topic(), args.rate, args.seconds,
                                    "_batched_" in workload, profile=profile, label=workload)
            else:
                batched = "_batched_" in workload
                result = in_process(in_tree, src, run_send_flat_out, kind, url, _topic(),
                                    flat * (4 if batched else 1), batched, profile=profile, label=workload)
            out.setdefault(workload, {})[label] = result
    return out


def summarise(rounds: list[dict[str, dict[str, dict]]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for workload, first in rounds[0].items():
        row: dict[str, Any] = {}
        for label in first:
            runs = [r[workload][label] for r in rounds]
            row[label] = {"cpu_us_per_msg": round(statistics.median(r["cpu_us_per_msg"] for r in runs), 2),
                          "rounds_cpu_us_per_msg": [r["cpu_us_per_msg"] for r in runs],
                          **{key: round(statistics.median(r[key] for r in runs), 2)
                              for key in ("user_us_per_msg", "sys_us_per_msg", "switches_per_msg",
                                         "loop_polls_per_msg", "batched_share") if key in runs[0]},
                          "msg_per_s": round(statistics.median(r["msg_per_s"] for r in runs))}
        ours = row["magnetar"]["cpu_us_per_msg"]
        row["ratio_cpu_magnetar_over_official"] = round(ours / row["official"]["cpu_us_per_msg"], 2)
        if "magnetar_baseline" in row:
            row["ratio_cpu_magnetar_over_baseline"] = round(ours / row["magnetar_baseline"]["cpu_us_per_msg"], 2)
        table[workload] = row
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=10_000, help="msg/s of the at-rate workloads (default 10000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of an at-rate run (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, the clients' order turning (default 2)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="also magnetar.client imported from this source tree (another checkout's src/)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy flame graphs of the magnetar runs here")
    args = parser.parse_args()
    if not 1 <= args.rate <= 100_000 or args.seconds <= 0 or args.rounds < 1:
        parser.error("--rate must be 1..100000, --seconds and --rounds positive")
    args.workloads = [name.strip() for name in args.workloads.split(",") if name.strip()]
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown or not args.workloads:
        parser.error(f"--workloads: unknown {', '.join(unknown)}" if unknown else "--workloads: none given")
    if args.baseline is not None and not (args.baseline / "magnetar" / "client").is_dir():
        parser.error(f"--baseline {args.baseline}: no magnetar/client there (give a checkout's src/)")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from standalone import Standalone  # noqa: PLC0415

    clients: list[tuple[str, str, str | None]] = [("official", "official", None), ("magnetar", "magnetar", None)]
    if args.baseline is not None:
        clients.append(("magnetar_baseline", "magnetar", str(args.baseline.resolve())))
    data = Path(tempfile.mkdtemp(prefix="client-cost-"))
    load_before = os.getloadavg()
    broker = Standalone(data / "data", ["journalSyncData=false"]).start()
    try:
        rounds = [one_round(clients[index % len(clients):] + clients[:index % len(clients)], broker.url, args)
                  for index in range(args.rounds)]
    finally:
        broker.stop()
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps({"rate": args.rate, "seconds": args.seconds, "rounds": args.rounds,
                      "callback_every": EVERY, "payload_bytes": len(PAYLOAD),
                      "baseline": None if args.baseline is None else str(args.baseline),
                      "loadavg_before": [round(x, 2) for x in load_before],
                      "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                      "cpus": os.cpu_count(), **summarise(rounds)}, indent=2))


if __name__ == "__main__":
    main()
