"""A loopback stand-in for a broker that records what the official pulsar-client sends.

Test code only (threads and sockets are fine here; `magnetar.wire` stays sans-IO). It
answers just enough of the protocol for a producer to publish and a consumer to receive
(official-client-trace.md §2-§5) and keeps the raw bytes of every SEND frame, which are
the test vectors: bytes the C++ client itself laid out.

`SCENARIOS` is the single description of what gets sent; the tests check decoded vectors
against it, so the checked-in recording and a fresh one are held to the same expectations.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pulsar

from magnetar.wire.frames import FrameDecoder, encode_command, encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

VECTORS_DIR = Path(__file__).parent / "vectors"
LEDGER_ID = 7
MAX_MESSAGE_SIZE = 5 * 1024 * 1024
DELAY_MS = 30_000

T = pb.BaseCommand.Type


@dataclass(frozen=True)
class Scenario:
    """One producer's worth of sends: `messages` are the kwargs of `Producer.send`."""

    name: str
    messages: list[dict[str, Any]]
    batched: bool = False
    compression: str = "NONE"

    @property
    def topic(self) -> str:
        return f"persistent://public/default/vectors-{self.name}"

    @property
    def producer_name(self) -> str:
        return f"vec-{self.name}"


def _batch_messages() -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {
            "content": f"batched message {i} ".encode() * 4,
            "properties": {"i": str(i), "kind": "batch"},
            "partition_key": f"key-{i}",
            "event_timestamp": 1_700_000_000_000 + i,
        }
        for i in range(4)
    ]
    messages.append({"content": b"", "ordering_key": "ord-4"})
    return messages


SCENARIOS = [
    Scenario("plain", [{"content": b"plain"}, {"content": b""}]),
    Scenario(
        "keyed",
        [
            {
                "content": b"with everything",
                "properties": {"a": "1", "b": "2"},
                "partition_key": "pk1",
                "ordering_key": "ord-1",
                "event_timestamp": 1_700_000_000_123,
            }
        ],
    ),
    Scenario("delayed", [{"content": b"later", "deliver_after": timedelta(milliseconds=DELAY_MS)}]),
    Scenario("single_lz4", [{"content": b"compress me " * 10}], compression="LZ4"),
    *(
        Scenario(f"batch_{codec.lower()}", _batch_messages(), batched=True, compression=codec)
        for codec in ("NONE", "LZ4", "ZLib", "ZSTD", "SNAPPY")
    ),
]


def take_frames(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete raw frames at the front of `buffer` (size prefix kept), and the rest."""
    frames = []
    offset = 0
    while len(buffer) - offset >= 4:
        end = offset + 4 + struct.unpack_from(">I", buffer, offset)[0]
        if end > len(buffer):
            break
        frames.append(buffer[offset:end])
        offset = end
    return frames, buffer[offset:]


@dataclass
class _Connection:
    """Per-connection ids: producer id -> topic, consumer id -> topic."""

    producers: dict[int, str] = field(default_factory=dict)
    consumers: dict[int, str] = field(default_factory=dict)


@dataclass
class Recorder:
    """The stub broker. `serve[topic]` lists entries to deliver to any consumer of it."""

    sends: dict[str, list[bytes]] = field(default_factory=dict)
    acks: list[pb.CommandAck] = field(default_factory=list)
    serve: dict[str, list[bytes]] = field(default_factory=dict)
    _sock: socket.socket = field(init=False)

    def start(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def stop(self) -> None:
        self._sock.close()

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self._sock.getsockname()[1]}"

    def _accept_loop(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._sock.accept()
                threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def _serve_connection(self, sock: socket.socket) -> None:
        conn = _Connection()
        buffer = b""
        with sock, contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                frames, buffer = take_frames(buffer + chunk)
                for raw in frames:
                    (frame,) = FrameDecoder().feed(raw)
                    handler = _HANDLERS.get(frame.command.type)
                    for reply in handler(self, frame.command, raw, conn) if handler else ():
                        sock.sendall(reply)

    def _connect(self, cmd: pb.BaseCommand, _raw: bytes, _conn: _Connection) -> Iterator[bytes]:
        yield _command(
            T.CONNECTED,
            "connected",
            server_version="magnetar-recorder",
            protocol_version=20,
            max_message_size=MAX_MESSAGE_SIZE,
        )

    def _partitions(self, cmd: pb.BaseCommand, _raw: bytes, _conn: _Connection) -> Iterator[bytes]:
        yield _command(
            T.PARTITIONED_METADATA_RESPONSE,
            "partitionMetadataResponse",
            request_id=cmd.partitionMetadata.request_id,
            partitions=0,
            response=pb.CommandPartitionedTopicMetadataResponse.Success,
        )

    def _lookup(self, cmd: pb.BaseCommand, _raw: bytes, _conn: _Connection) -> Iterator[bytes]:
        yield _command(
            T.LOOKUP_RESPONSE,
            "lookupTopicResponse",
            request_id=cmd.lookupTopic.request_id,
            response=pb.CommandLookupTopicResponse.Connect,
            brokerServiceUrl=self.url,
            authoritative=True,
        )

    def _producer(self, cmd: pb.BaseCommand, _raw: bytes, conn: _Connection) -> Iterator[bytes]:
        conn.producers[cmd.producer.producer_id] = cmd.producer.topic
        yield _command(
            T.PRODUCER_SUCCESS,
            "producer_success",
            request_id=cmd.producer.request_id,
            producer_name=cmd.producer.producer_name or f"recorder-{cmd.producer.producer_id}",
            last_sequence_id=-1,
        )

    def _send(self, cmd: pb.BaseCommand, raw: bytes, conn: _Connection) -> Iterator[bytes]:
        entries = self.sends.setdefault(conn.producers[cmd.send.producer_id], [])
        entries.append(raw)
        yield _command(
            T.SEND_RECEIPT,
            "send_receipt",
            producer_id=cmd.send.producer_id,
            sequence_id=cmd.send.sequence_id,
            message_id=pb.MessageIdData(ledgerId=LEDGER_ID, entryId=len(entries) - 1),
        )

    def _subscribe(self, cmd: pb.BaseCommand, _raw: bytes, conn: _Connection) -> Iterator[bytes]:
        conn.consumers[cmd.subscribe.consumer_id] = cmd.subscribe.topic
        yield _command(T.SUCCESS, "success", request_id=cmd.subscribe.request_id)

    def _flow(self, cmd: pb.BaseCommand, _raw: bytes, conn: _Connection) -> Iterator[bytes]:
        topic = conn.consumers[cmd.flow.consumer_id]
        for entry_id, entry in enumerate(self.serve.pop(topic, [])):
            message = pb.BaseCommand(type=T.MESSAGE)
            message.message.consumer_id = cmd.flow.consumer_id
            message.message.message_id.CopyFrom(pb.MessageIdData(ledgerId=LEDGER_ID, entryId=entry_id))
            yield encode_payload_command(message, entry)

    def _ack(self, cmd: pb.BaseCommand, _raw: bytes, _conn: _Connection) -> Iterator[bytes]:
        self.acks.append(cmd.ack)
        yield from ()

    def _ping(self, cmd: pb.BaseCommand, _raw: bytes, _conn: _Connection) -> Iterator[bytes]:
        yield _command(T.PONG, "pong")

    def _success(self, cmd: pb.BaseCommand, _raw: bytes, _conn: _Connection) -> Iterator[bytes]:
        body = getattr(cmd, pb.BaseCommand.DESCRIPTOR.fields_by_number[cmd.type].name)
        yield _command(T.SUCCESS, "success", request_id=body.request_id)


_Handler = Callable[[Recorder, pb.BaseCommand, bytes, _Connection], Iterator[bytes]]
_HANDLERS: dict[int, _Handler] = {
    T.CONNECT: Recorder._connect,
    T.PARTITIONED_METADATA: Recorder._partitions,
    T.LOOKUP: Recorder._lookup,
    T.PRODUCER: Recorder._producer,
    T.SEND: Recorder._send,
    T.SUBSCRIBE: Recorder._subscribe,
    T.FLOW: Recorder._flow,
    T.ACK: Recorder._ack,
    T.PING: Recorder._ping,
    T.CLOSE_PRODUCER: Recorder._success,
    T.CLOSE_CONSUMER: Recorder._success,
    T.UNSUBSCRIBE: Recorder._success,
}


def _command(kind: int, field_name: str, **fields: Any) -> bytes:
    cmd = pb.BaseCommand(type=kind)
    getattr(cmd, field_name).SetInParent()
    for name, value in fields.items():
        target = getattr(cmd, field_name)
        if isinstance(value, pb.MessageIdData):
            getattr(target, name).CopyFrom(value)
        else:
            setattr(target, name, value)
    return encode_command(cmd)


@contextlib.contextmanager
def running_recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    recorder.start()
    try:
        yield recorder
    finally:
        recorder.stop()


def new_client(recorder: Recorder) -> pulsar.Client:
    return pulsar.Client(
        recorder.url,
        operation_timeout_seconds=10,
        connection_timeout_ms=5000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def record(recorder: Recorder, scenarios: list[Scenario] = SCENARIOS) -> dict[str, list[bytes]]:
    """Run every scenario through the official client; raw SEND frames per scenario."""
    client = new_client(recorder)
    try:
        for scenario in scenarios:
            _run(client, scenario)
    finally:
        client.close()
    return {s.name: recorder.sends.get(s.topic, []) for s in scenarios}


def _run(client: pulsar.Client, scenario: Scenario) -> None:
    producer = client.create_producer(
        scenario.topic,
        producer_name=scenario.producer_name,
        compression_type=getattr(pulsar.CompressionType, scenario.compression),
        batching_enabled=scenario.batched,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=60_000,
        send_timeout_millis=10_000,
    )
    if scenario.batched:
        done: list[pulsar.Result] = []
        for message in scenario.messages:
            producer.send_async(callback=lambda result, _id: done.append(result), **message)
        producer.flush()
        deadline = time.monotonic() + 10
        while len(done) < len(scenario.messages) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert done == [pulsar.Result.Ok] * len(scenario.messages), done
    else:
        for message in scenario.messages:
            producer.send(**message)
    producer.close()


def save_vectors(recorded: dict[str, list[bytes]], directory: Path = VECTORS_DIR) -> None:
    """One file per scenario, one SEND frame per line in hex, so diffs stay readable."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, frames in recorded.items():
        (directory / f"{name}.hex").write_text("".join(f"{frame.hex()}\n" for frame in frames))


def load_vectors(directory: Path = VECTORS_DIR) -> dict[str, list[bytes]]:
    return {
        path.stem: [bytes.fromhex(line) for line in path.read_text().split()]
        for path in sorted(directory.glob("*.hex"))
    }
