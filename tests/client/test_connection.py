"""Connection behaviour against a scripted stub broker: lookup redirects, keep-alive, timeouts, receipts."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from polling import wait_for_async

from magnetar.client import errors
from magnetar.client.aio import Client
from magnetar.wire import commands
from magnetar.wire.frames import FrameDecoder, encode_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


class Stub:
    """A broker that answers CONNECT and then whatever `handler(command, write)` decides."""

    def __init__(self, handler, *, answer_pings=True):
        self.handler = handler
        self.answer_pings = answer_pings
        self.seen: list[pb.BaseCommand] = []
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"pulsar://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        self.writers.append(writer)
        decoder = FrameDecoder()
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    cmd = frame.command
                    self.seen.append(cmd)
                    if cmd.type == T.CONNECT:
                        writer.write(commands.connected("stub", 21, 5 * 1024 * 1024))
                    elif cmd.type == T.PING:
                        if self.answer_pings:
                            writer.write(commands.pong())
                    elif cmd.type == T.CLOSE_PRODUCER:
                        writer.write(commands.success(cmd.close_producer.request_id))
                    else:
                        self.handler(self, cmd, writer.write)
        writer.close()


def _redirect(request_id: int, url: str) -> bytes:
    answer = pb.CommandLookupTopicResponse(request_id=request_id, response=pb.CommandLookupTopicResponse.Redirect,
                                           brokerServiceUrl=url, authoritative=True)
    return encode_command(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=answer))


def serve_producer_setup(stub, cmd, write, last_sequence_id: int) -> bool:
    """What every stub scenario answers the same way: the topic is not partitioned, the
    stub owns it, a producer is admitted (the broker's last sequence id given)."""
    if cmd.type == T.PARTITIONED_METADATA:
        write(commands.partitioned_metadata_response(cmd.partitionMetadata.request_id, 0))
    elif cmd.type == T.LOOKUP:
        write(commands.lookup_connect(cmd.lookupTopic.request_id, stub.url))
    elif cmd.type == T.PRODUCER:
        write(commands.producer_success(cmd.producer.request_id, "stub-producer", last_sequence_id))
    else:
        return False
    return True


def test_lookup_follows_redirects_to_the_owner(shared_broker):
    def handler(stub, cmd, write):
        if cmd.type == T.PARTITIONED_METADATA:
            write(commands.partitioned_metadata_response(cmd.partitionMetadata.request_id, 0))
        elif cmd.type == T.LOOKUP:
            write(_redirect(cmd.lookupTopic.request_id, shared_broker.service_url))

    async def scenario():
        async with Stub(handler) as stub, Client(stub.url, operation_timeout_seconds=5) as client:
            producer = await client.create_producer("redirected")
            assert (await producer.send(b"x")).entry_id() >= 0
            assert producer.conn.physical_url == shared_broker.service_url

    asyncio.run(scenario())


def test_keep_alive_drops_a_silent_broker_and_reconnects():
    def handler(stub, cmd, write):
        if serve_producer_setup(stub, cmd, write, last_sequence_id=-1):
            return

    async def scenario():
        async with Stub(handler, answer_pings=False) as stub, \
                Client(stub.url, operation_timeout_seconds=5, keep_alive_interval_seconds=0.2) as client:
            await client.create_producer("quiet")

            def producers_seen() -> list[pb.CommandProducer]:
                return [c.producer for c in stub.seen if c.type == T.PRODUCER]
            # dropped after two silent intervals, then back, with its producer
            assert await wait_for_async(lambda: stub.connections >= 2 and len(producers_seen()) >= 2)
            producers = producers_seen()
            assert [p.epoch for p in producers][:2] == [0, 1]
            assert producers[1].producer_name == "stub-producer"

    asyncio.run(scenario())


def test_operation_timeout_and_send_timeout():
    def handler(stub, cmd, write):
        if serve_producer_setup(stub, cmd, write, last_sequence_id=41):
            return
        # SUBSCRIBE and SEND are never answered

    async def scenario():
        async with Stub(handler) as stub, Client(stub.url, operation_timeout_seconds=0.5) as client:
            with pytest.raises(errors.Timeout, match="within the operation timeout"):
                await client.subscribe("t", "sub")
            producer = await client.create_producer("t", send_timeout_millis=300)
            assert producer.last_sequence_id() == 41
            with pytest.raises(errors.Timeout):
                await producer.send(b"never acknowledged")
            sends = [c.send for c in stub.seen if c.type == T.SEND]
            assert sends[0].sequence_id == 42  # carries on from the broker's last sequence id

    asyncio.run(scenario())


def test_receipts_out_of_order_reconnect_and_resend_in_order():
    state = {"reordered": False}

    def handler(stub, cmd, write):
        if serve_producer_setup(stub, cmd, write, last_sequence_id=-1):
            return
        if cmd.type == T.SEND:
            seq = cmd.send.sequence_id
            if seq == 0 and not state["reordered"]:
                pass  # held back ...
            elif seq == 1 and not state["reordered"]:
                state["reordered"] = True
                write(commands.send_receipt(cmd.send.producer_id, 1, 7, 1, 1))  # ... so 1 comes before 0
            else:
                write(commands.send_receipt(cmd.send.producer_id, seq, 7, seq, seq))

    async def scenario():
        async with Stub(handler) as stub, Client(stub.url, operation_timeout_seconds=5) as client:
            producer = await client.create_producer("t")
            ids = await asyncio.gather(*(producer.send(f"{i}".encode()) for i in range(3)))
            assert [i.entry_id() for i in ids] == [0, 1, 2]
            sequence = [c.send.sequence_id for c in stub.seen if c.type == T.SEND]
            assert sequence[-3:] == [0, 1, 2] and len(sequence) > 3  # resent in order after reconnecting

    asyncio.run(scenario())
