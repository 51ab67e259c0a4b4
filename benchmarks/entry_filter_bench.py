"""What an entry filter costs dispatch, and what it saves, side by side in one run.

    .venv/bin/python benchmarks/entry_filter_bench.py [--messages 1000000]

A backlog of batches of 100 messages, grouped by `region` over 10 values with the region
as a batch-level property (as a producer with batched filter properties writes them),
is written straight into a data directory. A broker with the built-in selector filter
then serves two subscriptions with the official client: one with the selector
`region = 'r3'`, one without a filter. Prints ONE JSON object: entries judged per second,
consumer msg/s, and payload bytes sent for both; and, measured in-process, the filter's
cost per entry (building what a filter sees, the chain, the compiled selector).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import timeit
import urllib.request
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import Standalone

from magnetar.broker.entry_filters import EntryFilterProvider, FilterContext, FilterEntry
from magnetar.storage import ManagedLedgerFactory, Position
from magnetar.wire.batch import encode_batch
from magnetar.wire.entry import build_entry, parse_message_metadata
from magnetar.wire.proto import pulsar_api_pb2 as pb

BATCH = 100
REGIONS = 10
TOPIC = "persistent://public/default/filtered"
SELECTOR = "region = 'r3'"


def batch(sequence: int, region: str) -> bytes:
    payload = encode_batch([(pb.SingleMessageMetadata(sequence_id=sequence + i), b"x" * 100) for i in range(BATCH)])
    metadata = pb.MessageMetadata(producer_name="bench", sequence_id=sequence, publish_time=int(time.time() * 1000),
                                  num_messages_in_batch=BATCH, properties=[pb.KeyValue(key="region", value=region)])
    return build_entry(metadata, payload)


def write_backlog(data_dir: Path, messages: int) -> list[bytes]:
    entries = [batch(sequence, f"r{(sequence // BATCH) % REGIONS}") for sequence in range(0, messages, BATCH)]
    factory = ManagedLedgerFactory(data_dir)
    ledger = factory.open("public/default/persistent/filtered")
    for start in range(0, len(entries), 1000):
        chunk = entries[start:start + 1000]
        for entry in chunk[:-1]:
            ledger.append(entry)
        ledger.append_sync(chunk[-1])
    factory.close()
    return entries


def consume(client: pulsar.Client, subscription: str, expected: int, properties: dict[str, str]) -> float:
    consumer = client.subscribe(TOPIC, subscription, initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=10_000, properties=properties)
    started = time.perf_counter()
    for _ in range(expected):
        consumer.acknowledge(consumer.receive(timeout_millis=60_000))
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def wait_until_judged(admin_url: str, subscription: str, deadline_s: float = 120) -> None:
    """The filtered subscription is done once its whole backlog is gone (rejected or acked)."""
    url = f"{admin_url}/admin/v2/persistent/public/default/filtered/stats"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url) as response:
            stats = json.load(response)["subscriptions"].get(subscription, {})
        if stats.get("msgBacklog") == 0:
            return
        time.sleep(0.05)
    raise TimeoutError("the filtered subscription never caught up")


def filter_cost_us(entries: list[bytes]) -> dict[str, float]:
    chain = EntryFilterProvider().chain(["selector"])
    assert chain is not None
    context = FilterContext(TOPIC, "sub", {"selector": SELECTOR})
    judged = [(Position(1, i), parse_message_metadata(e), e) for i, e in enumerate(entries[:10_000])]

    def judge_all() -> None:
        for position, metadata, data in judged:
            chain.judge(FilterEntry(position, metadata, data), context)

    seconds = min(timeit.repeat(judge_all, number=1, repeat=5))
    return {"filter_us_per_entry": round(seconds / len(judged) * 1e6, 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        entries = write_backlog(data_dir, args.messages)
        broker = Standalone(data_dir, ["entryFilterNames=selector"]).start()
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        accepted = args.messages // REGIONS
        filtered_s = consume(client, "filtered", accepted, {"selector": SELECTOR})
        wait_until_judged(broker.admin_url, "filtered")
        plain_s = consume(client, "plain", args.messages, {})
        with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/persistent/public/default/filtered/stats") as r:
            stats = json.load(r)["subscriptions"]
        client.close()
        broker.stop()
    report = {
        "messages": args.messages, "entries": len(entries), "batch": BATCH, "regions": REGIONS,
        "with_selector": {
            "entries_judged_per_s": round(len(entries) / filtered_s),
            "consumer_msg_per_s": round(accepted / filtered_s),
            "bytes_sent": stats["filtered"]["bytesOutCounter"],
            "filter_counts": {k: v for k, v in stats["filtered"].items() if k.startswith("filter")},
        },
        "without_filter": {
            "entries_read_per_s": round(len(entries) / plain_s),
            "consumer_msg_per_s": round(args.messages / plain_s),
            "bytes_sent": stats["plain"]["bytesOutCounter"],
        },
        **filter_cost_us(entries),
    }
    sent = report["with_selector"]["bytes_sent"], report["without_filter"]["bytes_sent"]
    report["bytes_sent_ratio"] = round(sent[0] / sent[1], 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
