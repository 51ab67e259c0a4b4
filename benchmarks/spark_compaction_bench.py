"""Compaction of one big topic: the Spark job (`magnetar.spark.compact`, local[2]) against
the broker's own compactor, time and peak memory, printed as JSON.

    python benchmarks/spark_compaction_bench.py [--messages 10000000] [--keys 1000000]

The topic (`--messages` messages of `--value-bytes` bytes, keys drawn at random from
`--keys`, in LZ4 batches of 1,000 as the official client batches by default) is written
straight through storage, then copied, so both contenders compact byte-identical data
dirs. Each runs in a child process while this one samples the RSS of the child's whole
process tree (for Spark: the driver, its JVM and the Python workers): the broker's
compactor is the built-in service's `compact()`, the code a broker runs on its worker
thread; the Spark job reads the data dir and adopts its result offline (no broker
runs). `seconds` is the compaction alone (Spark's session start is reported apart). The
two compacted ledgers are then compared entry by entry: they must be identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import descendants, rss_kb

from magnetar.broker.compaction import CompactionOptions
from magnetar.broker.compaction.service import BuiltinCompactionService
from magnetar.storage import ManagedLedgerFactory
from magnetar.storage.compacted_ledger import CompactedLedgerStore
from magnetar.wire.batch import encode_single_message
from magnetar.wire.compression import compress
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

TOPIC = "persistent://public/default/bench"
NAME = "public/default/persistent/bench"
BATCH = 1000


def write_topic(data_dir: Path, messages: int, keys: int, value_bytes: int) -> None:
    rng = random.Random(7)
    filler = b"x" * max(0, value_bytes - 10)
    now = int(time.time() * 1000)
    with ManagedLedgerFactory(data_dir) as factory:
        ledger = factory.open(NAME)
        for first in range(0, messages, BATCH):
            count = min(BATCH, messages - first)
            plain = b"".join(encode_single_message(b"%09d|" % i + filler, sequence_id=i,
                                                   partition_key=f"k{rng.randrange(keys)}")
                             for i in range(first, first + count))
            md = pb.MessageMetadata(producer_name="bench", sequence_id=first, publish_time=now,
                                    num_messages_in_batch=count, compression=pb.LZ4, uncompressed_size=len(plain))
            ledger.append(build_entry(md, compress(pb.LZ4, plain)))
        ledger.close()


def run_child(mode: str, data_dir: Path) -> dict[str, object]:
    """Run this script in `mode` on `data_dir`; its JSON answer plus the tree's peak RSS."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", mode, "--data-dir", str(data_dir)],
                            stdout=subprocess.PIPE, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak[0] = max(peak[0], rss_kb(*descendants(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} child failed with {proc.returncode}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["peak_rss_mb"] = round(peak[0] / 1024, 1)
    return result


def child_broker(data_dir: Path) -> dict[str, object]:
    with ManagedLedgerFactory(data_dir) as factory:
        service = BuiltinCompactionService(factory.open(NAME), factory, CompactionOptions())
        started = time.perf_counter()
        result = service.compact()
        elapsed = time.perf_counter() - started
        service.close()
    assert result is not None
    return {"seconds": round(elapsed, 2), "keys": result.keys, "entries_written": result.entries_written}


def child_spark(data_dir: Path) -> dict[str, object]:
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from magnetar.spark.compaction import compact  # noqa: PLC0415

    started = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    session_seconds = time.perf_counter() - started
    started = time.perf_counter()
    (result,) = compact(spark, TOPIC, path=str(data_dir))
    elapsed = time.perf_counter() - started
    spark.stop()
    return {"seconds": round(elapsed, 2), "session_start_seconds": round(session_seconds, 2), "keys": result.keys,
            "entries_written": result.entries_written}


def ledger_digest(data_dir: Path) -> str:
    digest = hashlib.sha256()
    with ManagedLedgerFactory(data_dir, read_only=True) as factory:
        store = CompactedLedgerStore(factory, NAME)
        current = store.current
        assert current is not None
        for index in range(0, current.entries, 1024):
            for position, data in current.read(index, 1024):
                digest.update(repr(tuple(position)).encode())
                digest.update(data)
        store.close()
    return digest.hexdigest()


def bench(messages: int, keys: int, value_bytes: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="spark-compaction-bench-") as tmp:
        broker_dir, spark_dir = Path(tmp) / "broker", Path(tmp) / "spark"
        started = time.perf_counter()
        write_topic(broker_dir, messages, keys, value_bytes)
        write_seconds = time.perf_counter() - started
        shutil.copytree(broker_dir, spark_dir, ignore=shutil.ignore_patterns("LOCK"))
        broker = run_child("broker", broker_dir)
        spark = run_child("spark", spark_dir)
        identical = ledger_digest(broker_dir) == ledger_digest(spark_dir)
    return {"messages": messages, "keys": keys, "value_bytes": value_bytes, "write_seconds": round(write_seconds, 1),
            "broker_compactor": {**broker, "msg_per_s": round(messages / float(broker["seconds"]))},
            "spark_local2": {**spark, "msg_per_s": round(messages / float(spark["seconds"]))},
            "spark_over_broker_time": round(float(spark["seconds"]) / float(broker["seconds"]), 2),
            "compacted_ledgers_identical": identical}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--child", choices=("broker", "spark"), help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps((child_broker if args.child == "broker" else child_spark)(args.data_dir)))
        return
    report = {"python": sys.version.split()[0], "cores": os.cpu_count(),
              "note": "2 shared cores; other jobs ran beside it",
              "run": bench(args.messages, args.keys, args.value_bytes)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
