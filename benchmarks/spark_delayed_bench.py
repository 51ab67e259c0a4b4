"""Delayed delivery two ways on the same load: in the broker (PIP-26's tracker) and the
Spark delayed-dispatch pipeline (`magnetar.spark.delayed_dispatch`), printed as JSON.

    python benchmarks/spark_delayed_bench.py [--rate 200] [--seconds 30] [--delay-ms 5000]

Load: `--rate` msg/s of 100-byte unbatched messages for `--seconds`, each due `--delay-ms`
plus up to one more second after it was sent (property `at`, epoch ms).

The producer sets `deliver_at` (MessageMetadata's deliver_at_time) both ways.

- broker: a Shared consumer of the topic receives them when the broker releases them.
- spark: the pipeline (local[2], its own process, trigger 100 ms, warmed up before the
  load) reads them (a reader is not held back), holds them and writes them to an output
  topic (deduplication on), which an Exclusive consumer receives.

Reported per way: lateness (receive time - `at`) p50/p99/max, early deliveries (must be
0), messages lost, and the CPU seconds of the broker process over the run; for Spark
also the CPU seconds of its process tree (driver, JVM, Python workers). The machine is
shared: the load average is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from procfs import cpu_seconds, descendants
from standalone import Standalone

INTERCEPTORS = (
    "brokerEntryMetadataInterceptors=org.apache.pulsar.common.intercept.AppendBrokerTimestampMetadataInterceptor,"
    "org.apache.pulsar.common.intercept.AppendIndexMetadataInterceptor"
)
SPARK_CONFIG = [INTERCEPTORS, "exposingBrokerEntryMetadataToClientEnabled=true", "brokerDeduplicationEnabled=true"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def percentile(values: list[int], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def receive(consumer: pulsar.Consumer, expected: int, deadline: float, late: list[int]) -> None:
    while len(late) < expected and time.monotonic() < deadline:
        try:
            message = consumer.receive(1000)
        except pulsar.Timeout:
            continue
        late.append(now_ms() - int(message.properties()["at"]))
        consumer.acknowledge(message)


def run_load(url: str, topic: str, consumer: pulsar.Consumer, args: argparse.Namespace, broker_pid: int,
             spark_pid: int | None = None) -> dict[str, object]:
    expected = int(args.rate * args.seconds)
    late: list[int] = []
    deadline = time.monotonic() + args.seconds + args.delay_ms / 1000 + 180
    receiver = threading.Thread(target=receive, args=(consumer, expected, deadline, late))
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    rng = random.Random(5)
    broker_cpu = cpu_seconds(broker_pid)
    spark_cpu = cpu_seconds(*descendants(spark_pid)) if spark_pid else 0.0
    receiver.start()
    began = time.perf_counter()
    for i in range(expected):
        pause = began + i / args.rate - time.perf_counter()
        if pause > 0.001:
            time.sleep(pause)
        at = now_ms() + args.delay_ms + rng.randrange(1000)
        producer.send_async(b"x" * 100, None, properties={"at": str(at)}, deliver_at=at)
    producer.flush()
    receiver.join()
    result: dict[str, object] = {
        "messages": expected, "received": len(late), "lost": expected - len(late),
        "lateness_ms_p50": percentile(late, 0.5), "lateness_ms_p99": percentile(late, 0.99),
        "lateness_ms_max": max(late) if late else None, "early": sum(1 for v in late if v < 0),
        "broker_cpu_seconds": round(cpu_seconds(broker_pid) - broker_cpu, 2),
    }
    if spark_pid:
        result["spark_cpu_seconds"] = round(cpu_seconds(*descendants(spark_pid)) - spark_cpu, 2)
    client.close()
    return result


def in_broker(tmp: Path, args: argparse.Namespace) -> dict[str, object]:
    broker = Standalone(tmp / "broker")
    broker.start()
    try:
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe("delayed", "sub", consumer_type=pulsar.ConsumerType.Shared,
                                    receiver_queue_size=10_000)
        assert broker.proc is not None
        result = run_load(broker.url, "delayed", consumer, args, broker.proc.pid)
        client.close()
        return result
    finally:
        broker.stop()


def with_spark(tmp: Path, args: argparse.Namespace) -> dict[str, object]:
    broker = Standalone(tmp / "spark-broker", SPARK_CONFIG)
    broker.start()
    try:
        client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe("out", "sub", receiver_queue_size=10_000)
        warm = client.create_producer("in")
        warm.send(b"warm-up", properties={"at": "0"})
        child = subprocess.Popen([sys.executable, __file__, "--child", broker.url, str(tmp / "checkpoint")],
                                 stdin=subprocess.PIPE, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        try:
            consumer.receive(300_000)  # the warm-up message went through: the query is running
            assert broker.proc is not None
            result = run_load(broker.url, "in", consumer, args, broker.proc.pid, child.pid)
        finally:
            assert child.stdin is not None
            child.stdin.close()
            child.wait(120)
        client.close()
        return result
    finally:
        broker.stop()


def child(url: str, checkpoint: str) -> None:
    """The pipeline, until stdin closes."""
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from magnetar.spark.delayed_dispatch import delayed_dispatch  # noqa: PLC0415

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    query = delayed_dispatch(spark, "in", "out", service_url=url, checkpoint_location=checkpoint)
    sys.stdin.read()
    query.stop()
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--delay-ms", type=int, default=5000)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    report: dict[str, object] = {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "rate": args.rate,
                                 "seconds": args.seconds, "delay_ms": f"{args.delay_ms}..{args.delay_ms + 1000}"}
    with tempfile.TemporaryDirectory(prefix="spark-delayed-bench-") as tmp:
        report["in_broker"] = in_broker(Path(tmp), args)
        report["spark_pipeline"] = with_spark(Path(tmp), args)
    report["loadavg_end"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
