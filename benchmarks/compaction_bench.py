"""Compaction throughput and GetLastMessageId cost, printed as JSON.

    python benchmarks/compaction_bench.py [--messages 1000000] [--keys 10000]

1. Compaction: a topic of `--messages` messages over `--keys` keys, written straight
   through storage (non-batched, then LZ4 batches of 1000), compacted by the built-in
   service in-process. Reports msg/s and the peak RSS growth during each run; one more
   run with a tenth of the messages and the same keys shows memory follows keys, not
   messages (`--skip-scale` leaves it out).
2. GetLastMessageId on a compacted topic whose last entry is a 1000-message LZ4 batch:
   the metadata-only answer (PIP-429, field 31) against decompressing and scanning the
   batch for its last slot not compacted out (the way before PIP-429), and their ratio.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

from magnetar.broker.compaction import CompactionOptions
from magnetar.broker.compaction.service import BuiltinCompactionService
from magnetar.storage import ManagedLedgerFactory
from magnetar.wire.batch import encode_single_message
from magnetar.wire.compaction import last_retained_index
from magnetar.wire.compression import compress
from magnetar.wire.entry import build_entry, parse_entry, parse_message_metadata
from magnetar.wire.proto import pulsar_api_pb2 as pb

NAME = "public/default/persistent/bench"
BATCH = 1000


def rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class PeakRss:
    """Samples RSS on a thread while a block runs; reports growth over the start."""

    def __enter__(self) -> PeakRss:
        self.start = self.peak = rss_kb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss_kb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_kb())

    @property
    def growth_mb(self) -> float:
        return round((self.peak - self.start) / 1024, 1)


def write_topic(factory: ManagedLedgerFactory, messages: int, keys: int, batched: bool) -> None:
    ledger = factory.open(NAME)
    now = int(time.time() * 1000)
    if not batched:
        for i in range(messages):
            md = pb.MessageMetadata(producer_name="bench", sequence_id=i, publish_time=now,
                                    partition_key=f"k{i % keys}")
            ledger.append(build_entry(md, b"v%09d" % i))
    else:
        for first in range(0, messages, BATCH):
            count = min(BATCH, messages - first)
            plain = b"".join(encode_single_message(b"v%09d" % i, sequence_id=i, partition_key=f"k{i % keys}")
                             for i in range(first, first + count))
            md = pb.MessageMetadata(producer_name="bench", sequence_id=first, publish_time=now,
                                    num_messages_in_batch=count, compression=pb.LZ4, uncompressed_size=len(plain))
            ledger.append(build_entry(md, compress(pb.LZ4, plain)))
    ledger.close()


def bench_compaction(messages: int, keys: int, batched: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp, ManagedLedgerFactory(Path(tmp)) as factory:
        write_topic(factory, messages, keys, batched)
        service = BuiltinCompactionService(factory.open(NAME), factory, CompactionOptions())
        with PeakRss() as rss:
            started = time.perf_counter()
            result = service.compact()
            elapsed = time.perf_counter() - started
        assert result is not None and result.keys == keys, result
        service.close()
    return {"messages": messages, "keys": keys, "batched_lz4": batched, "seconds": round(elapsed, 2),
            "msg_per_s": round(messages / elapsed), "entries_written": result.entries_written,
            "peak_rss_growth_mb": rss.growth_mb}


def bench_last_message_id(rounds: int) -> dict[str, object]:
    """The compacted ledger's last entry: a 1000-message LZ4 batch with every key retained."""
    with tempfile.TemporaryDirectory() as tmp, ManagedLedgerFactory(Path(tmp)) as factory:
        write_topic(factory, BATCH, BATCH, batched=True)
        service = BuiltinCompactionService(factory.open(NAME), factory, CompactionOptions())
        service.compact()
        current = service.store.current
        assert current is not None
        _position, data = current.read(current.entries - 1, 1)[0]

        def metadata_only() -> int:
            return last_retained_index(parse_message_metadata(data))

        def decompressing() -> int:
            parsed = parse_entry(data)
            legacy = pb.MessageMetadata()
            legacy.CopyFrom(parsed.metadata)
            del legacy.compacted_batch_indexes[:]  # as if written before PIP-429
            return last_retained_index(legacy, lambda: parsed.payload, max_size=5 << 20)

        assert metadata_only() == decompressing() == BATCH - 1
        timings = {}
        for name, answer in (("metadata_only", metadata_only), ("decompress_batch", decompressing)):
            started = time.perf_counter()
            for _ in range(rounds):
                answer()
            timings[name] = (time.perf_counter() - started) / rounds * 1e6
        service.close()
    return {"batch_messages": BATCH, "rounds": rounds,
            "metadata_only_us": round(timings["metadata_only"], 2),
            "decompress_batch_us": round(timings["decompress_batch"], 2),
            "ratio": round(timings["decompress_batch"] / timings["metadata_only"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2000, help="GetLastMessageId repetitions")
    parser.add_argument("--skip-scale", action="store_true", help="leave out the 10x-messages memory check")
    args = parser.parse_args()
    report: dict[str, object] = {"python": sys.version.split()[0]}
    report["compaction"] = [bench_compaction(args.messages, args.keys, batched) for batched in (False, True)]
    if not args.skip_scale:
        # the batched run above, against one with a tenth of the messages and the same keys
        report["memory_follows_keys"] = bench_compaction(args.messages // 10, args.keys, True)
    report["get_last_message_id"] = bench_last_message_id(args.rounds)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
