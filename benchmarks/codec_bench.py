"""Entry codec throughput: what each layer costs to read.

    .venv/bin/python benchmarks/codec_bench.py [--quick]

Prints one JSON object: entries/s for a full decode of a 1000-message LZ4 batch entry
(parse entry + decompress + decode_batch), for peeking the broker-entry prefix, and for
parsing MessageMetadata alone; and the peek rate on a 1 KB and a 1 MB entry with their
ratio, which should be ~1 because the peek never looks past the prefix.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable

from magnetar.wire.batch import decode_messages, encode_batch
from magnetar.wire.compression import compress
from magnetar.wire.entry import add_broker_entry_metadata, build_entry, parse_entry, parse_message_metadata
from magnetar.wire.entry import peek_broker_entry_metadata as peek
from magnetar.wire.proto import pulsar_api_pb2 as pb

BATCH_SIZE = 1000
MAX_SIZE = 5 * 1024 * 1024
PUBLISH_TIME = 1_700_000_000_000
BEM = pb.BrokerEntryMetadata(broker_timestamp=PUBLISH_TIME, index=123_456)


def message_metadata(**fields: object) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="bench-producer", sequence_id=0, publish_time=PUBLISH_TIME, **fields)


def lz4_batch_entry() -> bytes:
    """A batch shaped like the C++ producer's: key, a property, event time, sequence id each."""
    plain = encode_batch(
        [
            (
                pb.SingleMessageMetadata(
                    partition_key=f"key-{i % 64}",
                    properties=[pb.KeyValue(key="source", value="bench")],
                    event_time=PUBLISH_TIME + i,
                    sequence_id=i,
                ),
                f'{{"id": {i}, "temperature": {20 + i % 15}, "site": "plant-{i % 7}"}}'.encode(),
            )
            for i in range(BATCH_SIZE)
        ]
    )
    metadata = message_metadata(
        num_messages_in_batch=BATCH_SIZE, compression=pb.LZ4, uncompressed_size=len(plain), partition_key="key-0"
    )
    return add_broker_entry_metadata(build_entry(metadata, compress(pb.LZ4, plain)), BEM)


def sized_entry(size: int) -> bytes:
    return add_broker_entry_metadata(build_entry(message_metadata(), bytes(size)), BEM)


def full_decode(entry: bytes) -> int:
    parsed = parse_entry(entry)
    return len(decode_messages(parsed.metadata, parsed.payload, max_size=MAX_SIZE))


def rate(call: Callable[[bytes], object], entry: bytes, seconds: float) -> float:
    """Calls per second, best of three runs of `seconds / 3` (the least disturbed)."""
    best = 0.0
    for _ in range(3):
        calls = 0
        batch = 1
        start = time.perf_counter()
        deadline = start + seconds / 3
        while (now := time.perf_counter()) < deadline:
            for _ in range(batch):
                call(entry)
            calls += batch
            batch = min(batch * 2, 4096)
        best = max(best, calls / (now - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description="entry codec throughput")
    parser.add_argument("--quick", action="store_true", help="short run (~3 s) for CI smoke tests")
    seconds = 0.5 if parser.parse_args().quick else 6.0

    batch_entry = lz4_batch_entry()
    assert full_decode(batch_entry) == BATCH_SIZE
    small, large = sized_entry(1024), sized_entry(1024 * 1024)
    full = rate(full_decode, batch_entry, seconds)
    peek_small = rate(peek, small, seconds)
    peek_large = rate(peek, large, seconds)
    result = {
        "python": platform.python_version(),
        "seconds_per_measurement": seconds,
        "lz4_batch_entry_bytes": len(batch_entry),
        "full_decode_entries_per_s": round(full),
        "full_decode_messages_per_s": round(full * BATCH_SIZE),
        "peek_broker_entry_metadata_entries_per_s": round(rate(peek, batch_entry, seconds)),
        "parse_message_metadata_entries_per_s": round(rate(parse_message_metadata, batch_entry, seconds)),
        "peek_1kb_entries_per_s": round(peek_small),
        "peek_1mb_entries_per_s": round(peek_large),
        "peek_1kb_over_1mb_ratio": round(peek_small / peek_large, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
