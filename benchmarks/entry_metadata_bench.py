"""PIP-70 benchmark: seek by time and the cost of the interceptors. Prints one JSON object.

1. Seek by time on a topic of N entries (default 1,000,000), stamped the way the
   broker stamps them: the prefix-only binary search vs a linear scan that parses
   MessageMetadata, for several target times; entry reads and latency side by side.
2. Produce throughput through a real standalone with the official client,
   interceptors off vs on, batched and not, alternating runs; the ratio on/off.

    python benchmarks/entry_metadata_bench.py [--entries N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pulsar

from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.storage.message_finder import EntrySequence, find_first_at_or_after
from magnetar.wire.entry import add_broker_entry_metadata, build_entry, parse_message_metadata
from magnetar.wire.proto import pulsar_api_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from standalone import NO_ENTRY_METADATA, Standalone

INTERCEPTORS = (
    "brokerEntryMetadataInterceptors="
    "org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)


def build_topic(data_dir: Path, entries: int) -> list[int]:
    """Append `entries` entries stamped one broker millisecond apart; return their times."""
    start = int(time.time() * 1000) - entries
    config = ManagedLedgerConfig(max_entries_per_ledger=50_000, sync_data=False)
    with ManagedLedgerFactory(data_dir, config) as factory:
        ledger = factory.open("public/default/persistent/seek-bench")
        payload = b"x" * 100
        for i in range(entries):
            metadata = pb.MessageMetadata(producer_name="bench", sequence_id=i, publish_time=start + i)
            prefix = pb.BrokerEntryMetadata(broker_timestamp=start + i, index=i)
            ledger.append(add_broker_entry_metadata(build_entry(metadata, payload), prefix))
    return [start + i for i in range(entries)]


def linear_scan(sequence: EntrySequence, timestamp: int) -> tuple[int, int]:
    """What a broker without the prefix does: parse MessageMetadata entry by entry."""
    ledger = sequence.ledger
    position = ledger.first_position
    reads = 0
    while reads < sequence.size:
        batch = ledger.read_entries(position, 1000)
        for pos, data in batch:
            reads += 1
            if parse_message_metadata(data).publish_time >= timestamp:
                return reads, pos.entry_id
        position = ledger.next_position(batch[-1][0])
    return reads, -1


def seek_benchmark(entries: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        times = build_topic(Path(tmp), entries)
        build_s = time.perf_counter() - t0
        with ManagedLedgerFactory(Path(tmp), read_only=True) as factory:
            ledger = factory.open("public/default/persistent/seek-bench")
            sequence = EntrySequence(ledger)
            targets = [times[int(entries * f)] for f in (0.1, 0.5, 0.9, 0.99)]
            binary_reads, cold_s, binary_s, linear_reads, linear_s = [], [], [], [], []
            for target in targets:
                for timings in (cold_s, binary_s):  # first search also opens the ledgers it touches
                    t0 = time.perf_counter()
                    result = find_first_at_or_after(ledger, target)
                    timings.append(time.perf_counter() - t0)
                binary_reads.append(result.entries_read)
                t0 = time.perf_counter()
                reads, _ = linear_scan(sequence, target)
                linear_s.append(time.perf_counter() - t0)
                linear_reads.append(reads)
                assert result.position == sequence.position(reads - 1)
    return {
        "entries": entries,
        "build_seconds": round(build_s, 2),
        "target_fractions": [0.1, 0.5, 0.9, 0.99],
        "binary_search_entry_reads": binary_reads,
        "binary_search_cold_ms": [round(s * 1000, 3) for s in cold_s],
        "binary_search_warm_ms": [round(s * 1000, 3) for s in binary_s],
        "linear_scan_entry_reads": linear_reads,
        "linear_scan_ms": [round(s * 1000, 1) for s in linear_s],
        "speedup_median_warm": round(statistics.median(linear_s) / statistics.median(binary_s), 1),
        "speedup_median_cold": round(statistics.median(linear_s) / statistics.median(cold_s), 1),
    }


def produce_rate(url: str, topic: str, messages: int, batching: bool) -> float:
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_messages=1000, batching_max_publish_delay_ms=5,
        max_pending_messages=20000, block_if_queue_full=True,
    )
    payload = b"x" * 100
    start = time.perf_counter()
    for _ in range(messages):
        producer.send_async(payload, None)
    producer.flush()
    elapsed = time.perf_counter() - start
    client.close()
    return messages / elapsed


def interceptor_cost(rounds: int, messages: dict[bool, int]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        off = Standalone(Path(tmp) / "off", list(NO_ENTRY_METADATA)).start()
        on = Standalone(Path(tmp) / "on", [INTERCEPTORS]).start()
        results: dict[str, object] = {}
        try:
            for batching in (True, False):
                rates: dict[str, list[float]] = {"off": [], "on": []}
                for r in range(rounds):
                    for name, broker in (("off", off), ("on", on)) if r % 2 == 0 else (("on", on), ("off", off)):
                        rates[name].append(produce_rate(broker.url, f"t-{batching}-{r}", messages[batching], batching))
                kind = "batched" if batching else "non_batched"
                results[f"{kind}_msg_per_s_off"] = round(statistics.median(rates["off"]))
                results[f"{kind}_msg_per_s_on"] = round(statistics.median(rates["on"]))
                on_off = statistics.median(rates["on"]) / statistics.median(rates["off"])
                results[f"{kind}_ratio_on_off"] = round(on_off, 3)
        finally:
            off.stop()
            on.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    entries = 100_000 if args.quick else args.entries
    report: dict[str, object] = {"load_average": os.getloadavg()}
    report["seek_by_time"] = seek_benchmark(entries)
    counts = {True: 100_000, False: 10_000} if args.quick else {True: 400_000, False: 30_000}
    report["interceptor_cost"] = interceptor_cost(1 if args.quick else 3, counts)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
