"""The Kafka listener's cost per Produce request of one record, without a client in the way
(issue 45: librdkafka at linger.ms=0 sends a request per record).

    .venv/bin/python benchmarks/kafka_produce_path_bench.py [--requests 100000] [--entry-format pulsar]
    .venv/bin/python benchmarks/kafka_produce_path_bench.py --magnetar before=/old/src --magnetar after=src --rounds 2

Runs a real BrokerService and KafkaProtocolHandler's KafkaApis in this process (real ledger
files, fsync on, the default configuration) and plays one connection's bytes into a real
KafkaConnection: Produce v9 requests (acks=all) of one 100-byte record each, as librdkafka
lays them out, in reads of `--chunk` requests, never more than `--window` unanswered.
Answers are counted in what the connection writes. CPU is this process's (loop and sync
thread), so the figure is what the broker spends per request, free of a client's noise.
Prints one JSON object: CPU-s per million requests and requests/s, per entry format. Each
`--magnetar LABEL=SRC` runs the workload in a process of its own with PYTHONPATH=SRC, so two
versions compare side by side in one run (rounds alternate their order; load average printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.service.collector import settle_after_start
from magnetar.broker.service.protocol_handlers import HandlerBroker
from magnetar.kafka.apis import KafkaApis
from magnetar.kafka.connection import Admission, KafkaConnection
from magnetar.kafka.protocol.messages import encode_request
from magnetar.kafka.topics import KafkaTopics

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kafka"))
from _played_connection import play
from kafka_brokers import batch, produce_request
from stub_transport import StubTransport

TOPIC = "bench"


class CountingTransport(StubTransport, asyncio.Transport):
    """It counts the answers (frames) the connection writes."""

    def __init__(self) -> None:
        super().__init__()
        self.answers = 0
        self.written = asyncio.Event()

    def writelines(self, data: list[bytes]) -> None:
        for written in data:
            at = 0
            while at < len(written):  # answers written together: count each by its length prefix
                at += 4 + int.from_bytes(written[at : at + 4], "big")
                self.answers += 1
        self.written.set()


def requests(count: int) -> list[bytes]:
    return [encode_request(0, 9, n, "rdkafka", produce_request(TOPIC, batch([b"x" * 100])))
            for n in range(count)]


async def run_workload(data_dir: Path, count: int, chunk: int, window: int, entry_format: str) -> dict[str, float]:
    config = ServiceConfiguration(bindAddress="127.0.0.1", brokerServicePort=0, entryFormat=entry_format)
    service = BrokerService(config, data_dir)
    await service.start()
    settle_after_start()
    try:
        broker = HandlerBroker(service)
        apis = KafkaApis(KafkaTopics(broker), config)
        apis.topics.create(TOPIC, 1)
        cnx = KafkaConnection(apis, config.maxMessageSize + 1024, sasl=False, address=("127.0.0.1", 9092),
                              admission=Admission(lambda _ip: True, lambda _ip: None, 0))
        transport = CountingTransport()
        cnx.connection_made(transport)  # type: ignore[arg-type]
        cpu, wall = await play(cnx.data_received, lambda: transport.answers, transport.written, requests(count), chunk,
                               window)
        cnx.connection_lost(None)
        apis.groups.stop()
    finally:
        await service.stop()
    return {"cpu_s_per_million": round(cpu / count * 1e6, 2), "requests_per_s": round(count / wall)}


def compare(sources: list[str], rounds: int, forwarded: list[str]) -> dict[str, object]:
    """This script once per source tree and round, in alternating order, side by side."""
    cells: dict[str, object] = {}
    for round_ in range(rounds):
        labelled = [item.split("=", 1) for item in sources]
        for label, source in labelled if round_ % 2 == 0 else labelled[::-1]:
            env = {**os.environ, "PYTHONPATH": str(Path(source).resolve())}
            out = subprocess.run([sys.executable, __file__, *forwarded], env=env, check=True, capture_output=True,
                                 text=True).stdout
            cells[f"{label} round {round_ + 1}"] = json.loads(out.splitlines()[-1])
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=8, help="requests per read of the socket")
    parser.add_argument("--window", type=int, default=128, help="requests without an answer, at most")
    parser.add_argument("--entry-format", action="append", choices=("pulsar", "kafka"))
    parser.add_argument("--magnetar", action="append", metavar="LABEL=SRC", help="a source tree to run (repeat)")
    parser.add_argument("--rounds", type=int, default=1, help="with --magnetar: rounds, alternating the order")
    args = parser.parse_args()
    if args.magnetar:
        forwarded = ["--requests", str(args.requests), "--chunk", str(args.chunk), "--window", str(args.window),
                     *(f"--entry-format={fmt}" for fmt in args.entry_format or [])]
        load_start = os.getloadavg()
        cells = compare(args.magnetar, args.rounds, forwarded)
        print(json.dumps({"cells": cells, "load_start": load_start, "load_end": os.getloadavg()}, indent=1))
        return
    base = Path(tempfile.mkdtemp(prefix="kafka-produce-path-"))
    try:
        result = {"requests": args.requests, "record_size": 100, **{
            f"entryFormat={fmt}": asyncio.run(run_workload(base / fmt, args.requests, args.chunk, args.window, fmt))
            for fmt in args.entry_format or ["pulsar", "kafka"]}}
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
