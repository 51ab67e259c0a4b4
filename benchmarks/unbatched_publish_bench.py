"""Issue 19's end-to-end figure: unbatched `send_async` with the official client, as users run it.

    .venv/bin/python benchmarks/unbatched_publish_bench.py [--messages 200000] [--rounds 3]

One `magnetar standalone` with its defaults (a receipt only after the group's fsync), one
`pulsar.Client`, a producer with `batching_enabled=False`, `max_pending_messages=5000` and
`block_if_queue_full=True` (the default, False, drops messages silently once the queue is
full when the callback ignores the result). Each round publishes `--messages` 100-byte
messages twice, to a new topic each time: once with a real Python callback that counts the
results, once with `callback=None` followed by `flush()`. The two modes alternate within a
round, so both meet the same machine load.

Prints ONE JSON object: per mode, each round's msg/s, broker CPU-s per million messages
(all its threads, from /proc) and client CPU-s per million (this process, the official
client's C++ threads included), then the medians. Every round is checked against the
topic's `msgInCounter`: a figure for messages that were not stored would mean nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pulsar
from _broker_process import MAX_PENDING, PAYLOAD, Meter, official_client, produce, start_standalone

MODES = ("callback", "none")
METRICS = ("msg_s", "broker_cpu_s_per_M", "client_cpu_s_per_M")


def send_without_callback(producer: pulsar.Producer, count: int) -> None:
    for _ in range(count):
        producer.send_async(PAYLOAD, None)
    producer.flush()


def stored(admin_url: str, topic: str) -> int:
    with urllib.request.urlopen(f"{admin_url}/admin/v2/persistent/public/default/{topic}/stats", timeout=30) as reply:
        return json.load(reply)["msgInCounter"]


def one_round(client: pulsar.Client, broker_pid: int, admin_url: str, topic: str, mode: str,
              count: int) -> dict[str, float]:
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=MAX_PENDING,
                                      block_if_queue_full=True, send_timeout_millis=120_000)
    send: Callable[[pulsar.Producer, int], object] = produce if mode == "callback" else send_without_callback
    with Meter(broker_pid) as meter:
        send(producer, count)
    producer.close()
    if (got := stored(admin_url, topic)) != count:
        raise SystemExit(f"{mode}: the broker stored {got} of {count} messages")
    per_m = 1e6 / count
    return {"msg_s": round(count / meter.wall), "broker_cpu_s_per_M": round(meter.cpu[broker_pid] * per_m, 2),
            "client_cpu_s_per_M": round(meter.own_cpu * per_m, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker configuration item, as `magnetar standalone -c` takes it")
    args = parser.parse_args()
    if args.messages < 1 or args.rounds < 1:
        parser.error("--messages and --rounds must be at least 1")
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="magnetar-unbatched-") as tmp:
        broker = start_standalone(Path(tmp) / "data", args.config)
        client = official_client(broker.url)
        try:
            for r in range(args.rounds):
                for mode in MODES if r % 2 == 0 else MODES[::-1]:
                    runs[mode].append(one_round(client, broker.proc.pid, broker.admin_url, f"unbatched-{mode}-{r}",
                                                mode, args.messages))
        finally:
            client.close()
            broker.stop()
    medians = {mode: {metric: round(statistics.median(run[metric] for run in runs[mode]), 2) for metric in METRICS}
               for mode in MODES}
    print(json.dumps({"messages": args.messages, "max_pending_messages": MAX_PENDING, "rounds": runs,
                      "median": medians}))


if __name__ == "__main__":
    sys.exit(main())
