"""What message deduplication costs unbatched publishing, side by side in one run.

    .venv/bin/python benchmarks/dedup_bench.py [--messages 50000] [--rounds 3]

One broker, two topics: deduplication on (topic policy) and off. Rounds alternate
between them with the official client (unbatched send_async with a real callback,
block_if_queue_full=True so nothing is dropped), 100-byte messages, a named producer.
Prints ONE JSON object with msg/s per round, the medians and their ratio (aim >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

PAYLOAD = b"x" * 100


def produce(client: pulsar.Client, topic: str, name: str, count: int, first_sequence: int) -> float:
    producer = client.create_producer(topic, producer_name=name, batching_enabled=False,
                                      block_if_queue_full=True, max_pending_messages=5000,
                                      send_timeout_millis=60_000)
    done = threading.Event()
    failures: list[pulsar.Result] = []
    left = [count]

    def sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            failures.append(result)
        left[0] -= 1
        if left[0] == 0:
            done.set()

    started = time.perf_counter()
    for i in range(count):
        producer.send_async(PAYLOAD, sent, sequence_id=first_sequence + i)
    done.wait(300)
    elapsed = time.perf_counter() - started
    producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed: {failures[:3]}")
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = Standalone(Path(tmp) / "data").start()
        url = f"{broker.admin_url}/admin/v2/persistent/public/default/with-dedup/deduplicationEnabled"
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        client.create_producer("with-dedup").close()
        urllib.request.urlopen(urllib.request.Request(url, data=b"true", method="POST",
                                                      headers={"Content-Type": "application/json"})).read()
        rates: dict[str, list[float]] = {"with-dedup": [], "without": []}
        for round_number in range(args.rounds):
            for topic, values in rates.items():
                values.append(produce(client, topic, "bench", args.messages, round_number * args.messages))
        client.close()
        broker.stop()
    medians = {topic: statistics.median(values) for topic, values in rates.items()}
    print(json.dumps({
        "messages_per_round": args.messages,
        "msg_per_s": {topic: [round(v) for v in values] for topic, values in rates.items()},
        "median_msg_per_s": {topic: round(v) for topic, v in medians.items()},
        "ratio_with_to_without": round(medians["with-dedup"] / medians["without"], 3),
    }, indent=2))


if __name__ == "__main__":
    main()
