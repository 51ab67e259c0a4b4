"""An identity Pulsar Function with its instance sandboxed (functionInstanceIsolation=
bubblewrap) and not (=none), against the same work done by a plain consume-produce script
with the official client: what the isolation costs at start and a message, side by side.

Two standalones run, one a setting. Each run fills an input topic with `--messages` messages
(100 bytes, batched), then starts the consumer of that backlog: a function deployed on one of
the workers (`def process(input): return input`, bytes in and out through a pass-through
serde, or `--serde identity` for Pulsar's default IdentitySerDe), or the script below in a
process of its own (receive, send_async to the output, acknowledge on the receipt: the
at-least-once loop an instance runs). A function's start is timed from the create request:
`create_s` until it answers (the worker checks the code in a child process started as an
instance is), `consuming_s` until the instance has subscribed. Draining is timed the same
way for all kinds, from the first output message to the last as a consumer of the output
sees them, with the CPU of the working process (/proc) read at both moments, so start-up
counts for none. The order of kinds turns run by run so drift in the machine's speed falls
on all; prints one JSON object with medians, the ratios and the load average before and after.

    .venv/bin/python benchmarks/functions_bench.py --messages 20000 --runs 3

`--compare guarantees` runs the same identity function (not sandboxed) under each processing
guarantee instead: ATLEAST_ONCE, EFFECTIVELY_ONCE on deduplication (a broker without the
transaction coordinator) and EFFECTIVELY_ONCE on transactions (a broker with
transactionCoordinatorEnabled: a transaction a message), side by side in one run.

    .venv/bin/python benchmarks/functions_bench.py --compare guarantees --messages 2000 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
from _broker_process import PAYLOAD, Standalone, cpu_seconds, official_client, start_standalone
from procfs import function_instance

from magnetar.admin_client import AdminClient, AdminError, FunctionsAdmin

ISOLATIONS = ("bubblewrap", "none")
GUARANTEES = {"atleast_once": ("plain", "ATLEAST_ONCE"), "effectively_once_dedup": ("plain", "EFFECTIVELY_ONCE"),
              "effectively_once_txn": ("txn", "EFFECTIVELY_ONCE")}
"""Each kind of `--compare guarantees`: the broker it runs on and the function's guarantee."""
BROKER_SETTINGS = {"bubblewrap": ["functionInstanceIsolation=bubblewrap"], "none": ["functionInstanceIsolation=none"],
                   "plain": ["functionInstanceIsolation=none", "transactionCoordinatorEnabled=false"],
                   "txn": ["functionInstanceIsolation=none", "transactionCoordinatorEnabled=true"]}

FUNCTION = '''
class Bytes:
    def serialize(self, value):
        return value

    def deserialize(self, data):
        return data


def process(input):
    return input
'''

SCRIPT = '''
import sys
import pulsar

client = pulsar.Client(sys.argv[1], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
consumer = client.subscribe(sys.argv[2], "plain", consumer_type=pulsar.ConsumerType.Shared,
                            initial_position=pulsar.InitialPosition.Earliest)
producer = client.create_producer(sys.argv[3], block_if_queue_full=True, batching_enabled=True,
                                  batching_max_publish_delay_ms=1, max_pending_messages=100000)
while True:
    message = consumer.receive()
    producer.send_async(message.data(), lambda result, _id, message=message: consumer.acknowledge(message))
'''


def fill(client: pulsar.Client, topic: str, count: int) -> None:
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True,
                                      max_pending_messages=10000)
    for _ in range(count):
        producer.send_async(PAYLOAD, None)
    producer.flush()
    producer.close()


def drain(output: pulsar.Consumer, count: int, pid_of: Callable[[], int]) -> tuple[float, float]:
    """(messages a second, CPU microseconds a message) between the first output and the last."""
    output.receive(120_000)
    pid = pid_of()
    started, cpu_started = time.perf_counter(), cpu_seconds(pid)
    for _ in range(count - 1):
        output.acknowledge(output.receive(60_000))
    seconds, cpu = time.perf_counter() - started, cpu_seconds(pid) - cpu_started
    return (count - 1) / seconds, cpu / (count - 1) * 1e6


def instance_pid(broker: Standalone) -> int:
    """The instance's Python process (under bwrap's two, when sandboxed)."""
    assert broker.proc is not None
    pid = function_instance(broker.proc.pid)
    if pid is None:
        raise RuntimeError("no instance process found")
    return pid


def consuming(admin: AdminClient, topic: str, subscription: str) -> bool:
    try:
        return bool(admin.stats(topic)["subscriptions"].get(subscription, {}).get("consumers"))
    except AdminError:  # not created yet
        return False


def run_function(client: pulsar.Client, broker: Standalone, code: Path, run: str, count: int,
                 serde: str, guarantee: str = "ATLEAST_ONCE") -> tuple[float, float, float, float]:
    """(messages a second, CPU us a message, seconds to create, seconds until consuming)."""
    functions = FunctionsAdmin(AdminClient(broker.admin_url))
    name, source, sink = f"identity{run}", f"fn-in-{run}", f"fn-out-{run}"
    fill(client, source, count)
    output = client.subscribe(sink, "bench")
    config = {"tenant": "public", "namespace": "default", "name": name, "className": "identity.process",
              "inputs": [source], "output": sink, "subscriptionPosition": "Earliest",
              "processingGuarantees": guarantee}
    if serde == "bytes":
        config.update(customSerdeInputs={source: "identity.Bytes"}, outputSerdeClassName="identity.Bytes")
    started = time.perf_counter()
    functions.create(config, code)
    created = time.perf_counter()
    while not consuming(functions.admin, source, f"public/default/{name}"):
        time.sleep(0.005)
    subscribed = time.perf_counter()
    try:
        return (*drain(output, count, lambda: instance_pid(broker)), created - started, subscribed - started)
    finally:
        output.close()
        functions.delete("public", "default", name)


def run_script(client: pulsar.Client, url: str, run: int, count: int) -> tuple[float, float]:
    source, sink = f"plain-in-{run}", f"plain-out-{run}"
    fill(client, source, count)
    output = client.subscribe(sink, "bench")
    script = subprocess.Popen([sys.executable, "-c", SCRIPT, url, source, sink])
    try:
        return drain(output, count, lambda: script.pid)
    finally:
        output.close()
        script.kill()
        script.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--serde", choices=("bytes", "identity"), default="bytes")
    parser.add_argument("--compare", choices=("isolation", "guarantees"), default="isolation")
    args = parser.parse_args()
    load_before = os.getloadavg()
    kinds = [*ISOLATIONS, "script"] if args.compare == "isolation" else list(GUARANTEES)
    results: dict[str, list[tuple[float, ...]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as scratch:
        code = Path(scratch) / "identity.py"
        code.write_text(FUNCTION)
        names = ISOLATIONS if args.compare == "isolation" else ("plain", "txn")
        brokers = {name: start_standalone(Path(scratch) / name, BROKER_SETTINGS[name]) for name in names}
        clients = {name: official_client(broker.url) for name, broker in brokers.items()}
        try:
            for run in range(args.runs):
                turn = run % len(kinds)
                for kind in kinds[turn:] + kinds[:turn]:
                    if kind == "script":
                        results[kind].append(run_script(clients["none"], brokers["none"].url, run, args.messages))
                        continue
                    where, guarantee = GUARANTEES.get(kind, (kind, "ATLEAST_ONCE"))
                    results[kind].append(run_function(clients[where], brokers[where], code, f"{kind}-{run}",
                                                      args.messages, args.serde, guarantee))
        finally:
            for opened in clients.values():
                opened.close()
            for broker in brokers.values():
                broker.stop()
    summary: dict[str, dict[str, object]] = {}
    for kind, runs in results.items():
        summary[kind] = {"msg_per_s": round(statistics.median(r[0] for r in runs)),
                         "cpu_us_per_msg": round(statistics.median(r[1] for r in runs), 1),
                         "runs": [[round(value, 3 if i > 1 else 1 if i else 0) for i, value in enumerate(r)]
                                  for r in runs]}
        if kind != "script":
            summary[kind].update(create_s=round(statistics.median(r[2] for r in runs), 3),
                                 consuming_s=round(statistics.median(r[3] for r in runs), 3))

    def ratio(kind: str, other: str, key: str) -> float | None:
        """None when the other is 0 (CPU is read in clock ticks: a tiny run may count none)."""
        denominator = float(summary[other][key])  # type: ignore[arg-type]
        return round(float(summary[kind][key]) / denominator, 2) if denominator else None  # type: ignore[arg-type]

    if args.compare == "isolation":
        ratios = {"rate_ratio_bubblewrap_to_none": ratio("bubblewrap", "none", "msg_per_s"),
                  "cpu_ratio_bubblewrap_to_none": ratio("bubblewrap", "none", "cpu_us_per_msg"),
                  "start_ratio_bubblewrap_to_none": ratio("bubblewrap", "none", "consuming_s"),
                  "rate_ratio_function_to_script": ratio("none", "script", "msg_per_s")}
    else:
        ratios = {"rate_ratio_txn_to_atleast_once": ratio("effectively_once_txn", "atleast_once", "msg_per_s"),
                  "rate_ratio_txn_to_dedup": ratio("effectively_once_txn", "effectively_once_dedup", "msg_per_s")}
    print(json.dumps({"messages": args.messages, "serde": args.serde, "compare": args.compare, **summary, **ratios,
                      "loadavg_before": load_before, "loadavg_after": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    main()
