"""Issue 33's figures: librdkafka producing and consuming through the Kafka listener, beside batched Pulsar produce.

    .venv/bin/python benchmarks/kafka_bench.py [--messages 500000]

For each entryFormat (kafka: batches stored as sent; pulsar: converted at produce) one
`magnetar standalone --kafka 0` with its defaults (answers only after the group's fsync):
one confluent-kafka (librdkafka) producer, 100-byte values, linger.ms=5, acks=all, no
compression, idempotence off (librdkafka's default), then one consumer reading them all
back from offset 0. On the first broker the official pulsar-client then publishes the same
number of 100-byte messages batched (1000 messages / 10 ms), the Pulsar-protocol figure
to compare the Kafka path's cost with.

Prints ONE JSON object: per run msg/s, broker CPU-s per million messages (all its threads,
from /proc) and client CPU-s per million (this process), with the machine's load average.
Every produce run is checked against the partition's end offset (or msgInCounter).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
import urllib.request
from pathlib import Path

from _broker_process import PAYLOAD, Meter, Standalone, official_client, produce, producer_options
from confluent_kafka import Consumer, Producer, TopicPartition

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")


def start(data_dir: Path, entry_format: str) -> tuple[Standalone, str]:
    broker = Standalone(data_dir, [f"entryFormat={entry_format}"], args=["--kafka", "0"]).start()
    return broker, f"127.0.0.1:{KAFKA_READY.findall(broker.log())[-1]}"


def _figures(meter: Meter, pid: int, count: int) -> dict[str, float]:
    per_m = 1e6 / count
    return {"msg_s": round(count / meter.wall), "broker_cpu_s_per_M": round(meter.cpu[pid] * per_m, 2),
            "client_cpu_s_per_M": round(meter.own_cpu * per_m, 2)}


def kafka_produce(bootstrap: str, pid: int, topic: str, count: int) -> dict[str, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "queue.buffering.max.messages": 1_000_000, "batch.size": 1_000_000})
    producer.list_topics(topic, timeout=30)  # the topic exists before the clock starts
    failed = []
    with Meter(pid) as meter:
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, PAYLOAD, on_delivery=lambda err, _m: err and failed.append(err))
                    break
                except BufferError:
                    producer.poll(0.001)
            if i % 10_000 == 0:
                producer.poll(0)
        producer.flush(600)
    if failed:
        raise SystemExit(f"{len(failed)} records failed, first: {failed[0]}")
    return _figures(meter, pid, count)


def kafka_consume(bootstrap: str, pid: int, topic: str, count: int) -> dict[str, float]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    if end != count:
        raise SystemExit(f"{topic}: the broker stored {end} of {count} records")
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    with Meter(pid) as meter:
        while got < count:
            got += len(consumer.consume(10_000, timeout=1))
    consumer.close()
    return _figures(meter, pid, count)


def pulsar_produce(broker: Standalone, topic: str, count: int) -> dict[str, float]:
    client = official_client(broker.url)
    producer = client.create_producer(topic, **producer_options(batched=True))
    with Meter(broker.proc.pid) as meter:
        produce(producer, count)
    producer.close()
    client.close()
    url = f"{broker.admin_url}/admin/v2/persistent/public/default/{topic}/stats"
    with urllib.request.urlopen(url, timeout=30) as reply:
        if (stored := json.load(reply)["msgInCounter"]) != count:
            raise SystemExit(f"pulsar: the broker stored {stored} of {count} messages")
    return _figures(meter, broker.proc.pid, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    args = parser.parse_args()
    results: dict[str, object] = {"messages": args.messages, "value_bytes": len(PAYLOAD)}
    with tempfile.TemporaryDirectory(prefix="magnetar-kafka-bench-") as tmp:
        for entry_format in ("kafka", "pulsar"):
            broker, bootstrap = start(Path(tmp) / entry_format, entry_format)
            try:
                pid = broker.proc.pid
                topic = f"bench-{entry_format}"
                results[f"kafka_produce_entryFormat_{entry_format}"] = kafka_produce(bootstrap, pid, topic,
                                                                                     args.messages)
                results[f"kafka_consume_entryFormat_{entry_format}"] = kafka_consume(bootstrap, pid, topic,
                                                                                     args.messages)
                if entry_format == "kafka":
                    results["pulsar_batched_produce"] = pulsar_produce(broker, "bench-pulsar-protocol",
                                                                       args.messages)
            finally:
                broker.stop()
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
