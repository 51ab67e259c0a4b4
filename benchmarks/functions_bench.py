"""An identity Pulsar Function against the same work done by a plain consume-produce script
with the official client: messages a second and CPU a message of the process doing it.

Each run fills an input topic with `--messages` messages (100 bytes, batched), then starts
the consumer of that backlog: either a function deployed on the standalone's worker
(`def process(input): return input`, bytes in and out through a pass-through serde, or
`--serde identity` for Pulsar's default IdentitySerDe), or the script below in a process of
its own (receive, send_async to the output, acknowledge on the receipt: the at-least-once
loop an instance runs). Both are timed the same way, from the first output message to the
last as a consumer of the output sees them, with the CPU of the working process (/proc)
read at both moments, so start-up counts for neither. Kinds alternate run by run so drift
in the machine's speed falls on both; prints one JSON object with medians, the ratios
(function / script) and the load average before and after.

    .venv/bin/python benchmarks/functions_bench.py --messages 20000 --runs 3
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
from _broker_process import PAYLOAD, cpu_seconds, official_client, start_standalone

from magnetar.admin.client import AdminClient
from magnetar.admin.functions_client import FunctionsAdmin

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


def run_function(client: pulsar.Client, functions: FunctionsAdmin, data_dir: Path, code: Path, run: int,
                 count: int, serde: str) -> tuple[float, float]:
    name, source, sink = f"identity{run}", f"fn-in-{run}", f"fn-out-{run}"
    fill(client, source, count)
    output = client.subscribe(sink, "bench")
    config = {"tenant": "public", "namespace": "default", "name": name, "className": "identity.process",
              "inputs": [source], "output": sink, "subscriptionPosition": "Earliest"}
    if serde == "bytes":
        config.update(customSerdeInputs={source: "identity.Bytes"}, outputSerdeClassName="identity.Bytes")
    functions.create(config, code)
    stats = data_dir / "functions" / "public" / "default" / name / "stats-0.json"
    try:
        return drain(output, count, lambda: json.loads(stats.read_text())["pid"])
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
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        code = Path(scratch) / "identity.py"
        code.write_text(FUNCTION)
        broker = start_standalone(Path(scratch) / "data", [])
        client = official_client(broker.url)
        functions = FunctionsAdmin(AdminClient(broker.admin_url))
        results: dict[str, list[tuple[float, float]]] = {"function": [], "script": []}
        try:
            for run in range(args.runs):
                results["function"].append(run_function(client, functions, broker.data_dir, code, run,
                                                        args.messages, args.serde))
                results["script"].append(run_script(client, broker.url, run, args.messages))
        finally:
            client.close()
            broker.stop()
    summary = {kind: {"msg_per_s": round(statistics.median(r[0] for r in runs)),
                      "cpu_us_per_msg": round(statistics.median(r[1] for r in runs), 1),
                      "runs": [[round(rate), round(cpu, 1)] for rate, cpu in runs]}
               for kind, runs in results.items()}
    print(json.dumps({
        "messages": args.messages, "serde": args.serde, **summary,
        "rate_ratio_function_to_script": round(summary["function"]["msg_per_s"] / summary["script"]["msg_per_s"], 2),
        "cpu_ratio_function_to_script": round(summary["function"]["cpu_us_per_msg"]
                                              / summary["script"]["cpu_us_per_msg"], 2),
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }, indent=2))


if __name__ == "__main__":
    main()
