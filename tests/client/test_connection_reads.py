"""magnetar.client's connection reads the socket into one buffer kept for its life
(asyncio's BufferedProtocol): what it hands on must never alias that buffer, frames split
anywhere across reads must come out whole, and a frame larger than the buffer must gather.
Driven three ways: the transport's calls made by hand (every byte boundary), a scripted
broker on a real socket, and a real broker with both clients."""

from __future__ import annotations

import asyncio
import random

import pytest
from kept_messages import keep_while_reading
from polling import wait_for_async
from seeds import fresh_seed
from test_connection import Stub

from magnetar.client.aio.connection import _READ_SIZE, Connection
from magnetar.wire.frames import encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


class Kept:
    """A consumer handler that keeps every (entry id, payload) it is given, as an application keeps messages."""

    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []

    def on_message(self, message: pb.CommandMessage, payload: bytes) -> None:
        self.got.append((message.message_id.entryId, payload))

    def on_broker_close(self, *, now: bool = False) -> None: ...
    def on_active_change(self, active: bool) -> None: ...
    def connection_closed(self, conn: Connection) -> None: ...


def _message(entry_id: int, payload: bytes) -> bytes:
    body = pb.CommandMessage(consumer_id=1, message_id=pb.MessageIdData(ledgerId=3, entryId=entry_id))
    return encode_payload_command(T(type=T.MESSAGE, message=body), payload)


def _read(conn: Connection, data: bytes) -> None:
    """What asyncio's transport does for one read; the buffer is then scribbled over, as the
    next read would."""
    buffer = conn.get_buffer(-1)
    assert len(buffer) >= len(data)
    buffer[: len(data)] = data
    conn.buffer_updated(len(data))
    buffer[: len(data)] = b"\xa5" * len(data)


def test_frames_split_at_every_byte_boundary_come_out_whole_and_stay_intact():
    payloads = [b"first" * 7, b"", b"x", bytes(range(256))]
    stream = b"".join(_message(i, p) for i, p in enumerate(payloads))
    expected = list(enumerate(payloads))

    async def scenario():
        for split in range(len(stream) + 1):
            for second in (split, min(len(stream), split + 17)):
                conn = Connection("u", "u", 5)
                kept = Kept()
                conn.consumers[1] = kept
                for start, end in ((0, split), (split, second), (second, len(stream))):
                    _read(conn, stream[start:end])
                assert [(i, p or b"") for i, p in kept.got] == expected, (split, second)
                assert conn._decoder.buffered == 0

    asyncio.run(scenario())


def test_a_frame_larger_than_the_read_buffer_gathers_over_reads():
    big = random.Random(7).randbytes(_READ_SIZE * 2 + 1234)
    stream = _message(1, b"before") + _message(2, big) + _message(3, b"after")

    async def scenario():
        conn = Connection("u", "u", 5)
        kept = Kept()
        conn.consumers[1] = kept
        for start in range(0, len(stream), _READ_SIZE):
            _read(conn, stream[start : start + _READ_SIZE])
        assert kept.got == [(1, b"before"), (2, big), (3, b"after")]

    asyncio.run(scenario())


@pytest.mark.parametrize("seed", [11, fresh_seed()])
def test_messages_over_a_socket_in_random_pieces_stay_intact(seed):
    rng = random.Random(seed)
    payloads = [rng.randbytes(rng.choice((0, 1, 50, 300, 5000, 70_000, _READ_SIZE + 99))) for _ in range(60)]
    stream = b"".join(_message(i, p) for i, p in enumerate(payloads))

    async def scenario():
        async with Stub(lambda *_: None) as stub:
            port = int(stub.url.rsplit(":", 1)[1])
            conn = await Connection.open(stub.url, stub.url, "127.0.0.1", port, operation_timeout=5,
                                         connection_timeout=5)
            kept = Kept()
            conn.consumers[1] = kept
            writer = stub.writers[-1]
            offset = 0
            while offset < len(stream):
                size = rng.choice((1, 3, 8, 100, 4096, 65536, _READ_SIZE * 2))
                writer.write(stream[offset : offset + size])
                await writer.drain()
                offset += size
                if rng.random() < 0.3:
                    await asyncio.sleep(0)  # let the client read what is there so far
            assert await wait_for_async(lambda: len(kept.got) == len(payloads), timeout=10), seed
            assert [(i, p or b"") for i, p in kept.got] == list(enumerate(payloads)), seed
            conn.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("batching", [False, True])
def test_received_messages_kept_by_the_application_stay_intact(api, topic, batching):
    keep_while_reading(api.client(), topic, batching=batching, seed=fresh_seed())
