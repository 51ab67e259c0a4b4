"""The broker's cost per published message, without a client in the way.

    .venv/bin/python benchmarks/publish_path_bench.py [--messages 200000] [--window 5000]

Runs a real BrokerService in this process (real ledger files, fsync on, the default
configuration) and plays one connection's bytes into it: CONNECT, PRODUCER, then SEND
frames built as the official client builds them, in reads of `--chunk` frames (what one
socket read held in a run with the official client: about 250), never more than
`--window` messages without a receipt (the client's maxPendingMessages). Receipts are
counted in what the connection writes.

CPU is this process's (loop and sync thread together) over the run, so a figure here is
what the broker spends per message, the number issue 19 is about, free of the noise of a
client process sharing two cores. Unbatched and batched (100 messages an entry) run side
by side in one run; the JSON gives CPU-s per million messages and msg/s for each.

`unbatched_stages_ns` splits an unbatched SEND's cost in the same run: the broker's own
steps over the same frames (the framing with the command's decoding, the checks before
storing, a receipt), and under them the protobuf calls no pure-Python broker can avoid
(parsing the command and the MessageMetadata, checking the metadata's required fields).
Each is the best of five passes over every frame, results discarded as the broker does.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.service.collector import settle_after_start
from magnetar.broker.transport.connection import ServerCnx
from magnetar.broker.transport.publish_checks import check_send
from magnetar.wire import client_commands
from magnetar.wire.batch import encode_batch
from magnetar.wire.commands import ReceiptEncoder
from magnetar.wire.entry import build_entry, parse_message_metadata
from magnetar.wire.frames import FrameDecoder
from magnetar.wire.proto import pulsar_api_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _played_connection import play
from stub_transport import StubTransport  # tests/ holds it, for the tests that run a ServerCnx too

RECEIPT_MARK = b"\x08\x07\x3a"  # BaseCommand type SEND_RECEIPT, then its body's tag
PRODUCER_NAME = "standalone-0-0"


class CountingTransport(StubTransport):
    """It counts the receipts the connection writes."""

    def __init__(self) -> None:
        super().__init__()
        self.receipts = 0
        self.written = asyncio.Event()

    def writelines(self, data: list[bytes]) -> None:
        for frame in data:
            self.receipts += frame.count(RECEIPT_MARK)
        self.written.set()


def send_frames(count: int, per_entry: int) -> list[bytes]:
    """SEND frames as the official client lays them out: metadata with producer name,
    sequence id and publish time; a batch's messages each with their SingleMessageMetadata."""
    frames = []
    now = int(time.time() * 1000)
    for sequence_id in range(0, count, per_entry):
        metadata = pb.MessageMetadata(producer_name=PRODUCER_NAME, sequence_id=sequence_id, publish_time=now)
        if per_entry == 1:
            payload = b"x" * 100
            metadata.uncompressed_size = len(payload)
            frames.append(client_commands.send(1, sequence_id, build_entry(metadata, payload)))
            continue
        payload = encode_batch([(pb.SingleMessageMetadata(payload_size=100, partition_key=f"key-{i}"), b"x" * 100)
                                for i in range(per_entry)])
        metadata.num_messages_in_batch = per_entry
        metadata.uncompressed_size = len(payload)
        frames.append(client_commands.send(1, sequence_id, build_entry(metadata, payload), num_messages=per_entry,
                                           highest_sequence_id=sequence_id + per_entry - 1))
    return frames


async def run_workload(data_dir: Path, messages: int, per_entry: int, chunk: int, window: int,
                       coordinator: bool = False) -> dict[str, float]:
    config = ServiceConfiguration(bindAddress="127.0.0.1", brokerServicePort=0,
                                  transactionCoordinatorEnabled=coordinator)
    service = BrokerService(config, data_dir)
    await service.start()
    settle_after_start()  # as `magnetar standalone` does once it is up
    try:
        cnx = ServerCnx(service)
        transport = CountingTransport()
        cnx.connection_made(transport)  # type: ignore[arg-type]
        cnx.data_received(client_commands.connect("bench"))
        cnx.data_received(client_commands.producer(1, 1, f"persistent://public/default/bench-{per_entry}",
                                                   producer_name=PRODUCER_NAME))
        await _producer_ready(cnx)
        entries_window = max(1, window // per_entry)
        cpu, wall = await play(cnx.data_received, lambda: transport.receipts, transport.written,
                               send_frames(messages, per_entry), chunk, entries_window)
        cnx.connection_lost(None)
    finally:
        await service.stop()
    return {"cpu_s_per_million": round(cpu / messages * 1e6, 2), "msg_per_s": round(messages / wall)}


async def _producer_ready(cnx: ServerCnx) -> None:
    """A new topic's ledger opens off the event loop, and the PRODUCER is answered once it is:
    a client sends nothing before that answer."""
    deadline = time.monotonic() + 30
    while 1 not in cnx.producers:
        if time.monotonic() > deadline:
            raise SystemExit("the broker never made the benchmark's producer")
        await asyncio.sleep(0.001)


def _best_ns_per_item(passes: Callable[[], object], items: int) -> float:
    best = min(_timed(passes) for _ in range(5))
    return round(best / items * 1e9)


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def stage_costs(data_dir: Path, messages: int, chunk: int) -> dict[str, float]:
    """Nanoseconds per unbatched SEND of each broker step, and of the protobuf calls under them.
    The checks run against a real topic of a default broker (they read its policies)."""
    service = BrokerService(ServiceConfiguration(), data_dir)
    try:
        return _stage_costs(service.get_topic("persistent://public/default/stages"), messages, chunk)
    finally:
        service.factory.close()


def _stage_costs(real_topic: object, messages: int, chunk: int) -> dict[str, float]:
    frames = send_frames(messages, 1)
    reads = [b"".join(frames[i : i + chunk]) for i in range(0, len(frames), chunk)]
    decoder = FrameDecoder()
    sends = [frame for read in reads for frame in decoder.feed(read)]
    bodies = [command.send for command, _ in sends]
    payloads = [payload for _, payload in sends]
    commands = [command.SerializeToString() for command, _ in sends]
    metadatas = [parse_message_metadata(payload).SerializeToString() for payload in payloads]
    topic, max_size = itertools.repeat(real_topic), itertools.repeat(5 << 20)
    if refused := next(filter(None, map(check_send, bodies, payloads, topic, max_size)), None):
        raise SystemExit(f"check_send refused the benchmark's own SENDs: {refused}")  # it would time the wrong path
    receipts = ReceiptEncoder(1)
    ids = [(i, i) for i in range(messages)]
    positions = [(7, i) for i in range(messages)]
    parse_command, parse_metadata = pb.BaseCommand.FromString, pb.MessageMetadata.FromString
    steps: dict[str, Callable[[], object]] = {  # each result dropped at once, as in the broker
        "frames_decoded": lambda: _drain(map(decoder.feed, reads)),
        "send_checked": lambda: _drain(map(check_send, bodies, payloads, topic, max_size)),
        "receipt_encoded": lambda: receipts.encode(ids, positions),
        "upb_command_parse": lambda: _drain(map(parse_command, commands)),
        "upb_metadata_parse": lambda: _drain(map(parse_metadata, metadatas)),
        "upb_metadata_parse_and_required_check": lambda: _drain(
            metadata.IsInitialized() for metadata in map(parse_metadata, metadatas)),
    }
    return {name: _best_ns_per_item(call, messages) for name, call in steps.items()}


def _drain(results: Iterable[object]) -> None:
    collections.deque(results, maxlen=0)


def coordinator_rounds(base: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """Unbatched CPU per million messages, off and on in turn so drift falls on both."""
    rounds: dict[str, list[float]] = {"off": [], "on": []}
    for number in range(args.coordinator_rounds):
        for label in ("off", "on") if number % 2 == 0 else ("on", "off"):
            run = asyncio.run(run_workload(base / f"c{number}{label}", args.messages, 1, args.chunk, args.window,
                                           coordinator=label == "on"))
            rounds[label].append(run["cpu_s_per_million"])
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=250, help="SEND frames per read of the socket")
    parser.add_argument("--window", type=int, default=5000, help="messages without a receipt, at most")
    parser.add_argument("--coordinator-rounds", type=int, default=0, metavar="N",
                        help="also N rounds alternating a broker without and with a transaction coordinator "
                             "(transactionCoordinatorEnabled): what the feature costs topics that never use it")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="publish-path-"))
    try:
        result = {
            "messages": args.messages,
            "message_size": 100,
            "unbatched": asyncio.run(run_workload(base / "u", args.messages, 1, args.chunk, args.window)),
            "batched_100": asyncio.run(run_workload(base / "b", args.messages, 100, args.chunk, args.window)),
            "unbatched_stages_ns": stage_costs(base / "s", min(args.messages, 100_000), args.chunk),
        }
        if args.coordinator_rounds:
            result["unbatched_cpu_s_per_million_by_coordinator"] = coordinator_rounds(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
