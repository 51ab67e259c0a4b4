"""A read of many frames is handled over several turns of the event loop, in order.

A real BrokerService in this process (real ledger files, fsync on) and a real ServerCnx,
fed one read holding a thousand SENDs as a socket would deliver it; the transport under
it records what the connection writes and whether reading is paused.
"""

from __future__ import annotations

import asyncio
import time

from polling import wait_for_async
from stub_transport import StubTransport

from magnetar.broker.config import ServiceConfiguration
from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.transport.connection import ServerCnx
from magnetar.broker.transport.read_turns import WORK_PER_TURN
from magnetar.wire import client_commands
from magnetar.wire.entry import build_entry
from magnetar.wire.frames import FrameDecoder
from magnetar.wire.proto import pulsar_api_pb2 as pb

TOPIC = "persistent://public/default/read-turns"
SENDS = 1000


class RecordingTransport(StubTransport):
    """It keeps what the connection writes."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def writelines(self, data: list[bytes]) -> None:
        for frame in data:
            self.written += frame

    def commands(self) -> list[pb.BaseCommand]:
        return [command for command, _ in FrameDecoder().feed(bytes(self.written))]


def sends(count: int) -> bytes:
    frames = []
    for sequence_id in range(count):
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=int(time.time() * 1000))
        frames.append(client_commands.send(1, sequence_id, build_entry(metadata, f"m{sequence_id}".encode())))
    return b"".join(frames)


async def connected(service: BrokerService) -> tuple[ServerCnx, RecordingTransport]:
    cnx, transport = ServerCnx(service), RecordingTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(client_commands.connect("test"))
    cnx.data_received(client_commands.producer(1, 1, TOPIC, producer_name="p"))
    assert await wait_for_async(lambda: any(c.type == pb.BaseCommand.PRODUCER_SUCCESS for c in transport.commands()))
    return cnx, transport


def receipts(transport: RecordingTransport) -> list[int]:
    return [c.send_receipt.sequence_id for c in transport.commands() if c.type == pb.BaseCommand.SEND_RECEIPT]


async def with_service(tmp_path, scenario) -> None:
    service = BrokerService(ServiceConfiguration(bindAddress="127.0.0.1", brokerServicePort=0), tmp_path)
    await service.start()
    try:
        await scenario(service)
    finally:
        await service.stop()


def test_a_big_read_is_handled_a_slice_per_turn_with_reading_paused_and_order_kept(tmp_path):
    async def scenario(service: BrokerService) -> None:
        cnx, transport = await connected(service)
        topic = service.topics[TOPIC]
        cnx.data_received(sends(SENDS))
        assert topic.inbound.messages == WORK_PER_TURN  # this turn's share; the rest waits
        assert transport.paused  # and the socket is not read meanwhile
        assert await wait_for_async(lambda: len(receipts(transport)) == SENDS)
        assert receipts(transport) == list(range(SENDS))
        assert not transport.paused
        stored = topic.ledger.read_entries(topic.ledger.first_position, SENDS + 1)
        assert [data.endswith(f"m{i}".encode()) for i, (_, data) in enumerate(stored)] == [True] * SENDS

    asyncio.run(with_service(tmp_path, scenario))


def test_the_end_of_a_backlog_leaves_a_pause_of_the_frame_budget_alone(tmp_path):
    async def scenario(service: BrokerService) -> None:
        cnx, transport = await connected(service)
        cnx.data_received(sends(SENDS))
        cnx.pause_reading()  # the broker-wide budget of partial frames holds this connection
        assert await wait_for_async(lambda: len(receipts(transport)) == SENDS)
        assert transport.paused  # still held: the backlog's end must not let it read again
        cnx.resume_reading()
        assert not transport.paused

    asyncio.run(with_service(tmp_path, scenario))


def test_a_stopping_broker_drops_what_it_read_but_did_not_handle(tmp_path):
    """SENDs read but not yet handled get no receipt and are not stored: the client sends
    them again to the next broker, and each is stored once."""

    async def scenario(service: BrokerService) -> tuple[int, int]:
        cnx, transport = await connected(service)
        topic = service.topics[TOPIC]
        cnx.data_received(sends(SENDS))
        await service.stop()
        return len(receipts(transport)), topic.ledger.number_of_entries()

    async def run() -> tuple[int, int]:
        service = BrokerService(ServiceConfiguration(bindAddress="127.0.0.1", brokerServicePort=0), tmp_path)
        await service.start()
        return await scenario(service)

    answered, stored = asyncio.run(run())
    assert answered == stored < SENDS
