"""A dispatch pass hands out at most one read's worth (dispatcherMaxReadBatchSize) of
entries, and the rest follows in later turns of the loop: a consumer with a receiver
queue of a thousand does not hold every other client up for the whole of it. In order,
for each kind of subscription. And the acks coming back are handled a slice per turn too."""

from __future__ import annotations

import asyncio

import pytest
from polling import wait_for_async
from test_read_turns import SENDS, TOPIC, RecordingTransport, connected, receipts, sends, with_service

from magnetar.broker.service.broker_service import BrokerService
from magnetar.broker.transport.connection import ServerCnx
from magnetar.broker.transport.read_turns import WORK_PER_TURN
from magnetar.wire import client_commands
from magnetar.wire.commands import encode_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

Sub = pb.CommandSubscribe


def delivered(transport: RecordingTransport) -> list[int]:
    return [c.message.message_id.entryId for c in transport.commands() if c.type == pb.BaseCommand.MESSAGE]


async def subscribed(service: BrokerService, sub_type: int) -> tuple[ServerCnx, RecordingTransport]:
    """SENDS messages stored, and a consumer subscribed from the earliest, with no permits yet."""
    producer_cnx, producer_transport = await connected(service)
    producer_cnx.data_received(sends(SENDS))
    assert await wait_for_async(lambda: len(receipts(producer_transport)) == SENDS)
    cnx, transport = ServerCnx(service), RecordingTransport()
    cnx.connection_made(transport)  # type: ignore[arg-type]
    cnx.data_received(client_commands.connect("test"))
    cnx.data_received(client_commands.subscribe(1, 1, TOPIC, "s", sub_type, initial_position=Sub.Earliest))
    assert await wait_for_async(lambda: any(c.type == pb.BaseCommand.SUCCESS for c in transport.commands()))
    return cnx, transport


@pytest.mark.parametrize("sub_type", [Sub.Exclusive, Sub.Failover, Sub.Shared, Sub.Key_Shared])
def test_a_pass_hands_out_one_read_and_the_rest_follows_in_order(tmp_path, sub_type):
    async def scenario(service: BrokerService) -> None:
        cnx, transport = await subscribed(service, sub_type)
        cnx.data_received(client_commands.flow(1, SENDS))
        dispatcher = service.topics[TOPIC].subscriptions["s"].dispatcher
        dispatcher.dispatch()  # one pass, as the loop would run it (its frames are written in a later turn)
        (consumer,) = dispatcher.consumers
        assert len(consumer.pending) == service.config.dispatcherMaxReadBatchSize
        assert await wait_for_async(lambda: len(delivered(transport)) == SENDS)
        assert delivered(transport) == list(range(SENDS))

    asyncio.run(with_service(tmp_path, scenario))


async def consuming(service: BrokerService) -> tuple[ServerCnx, RecordingTransport, list[pb.MessageIdData]]:
    """A consumer holding SENDS delivered messages, unacknowledged."""
    cnx, transport = await subscribed(service, Sub.Shared)
    cnx.data_received(client_commands.flow(1, SENDS))
    assert await wait_for_async(lambda: len(delivered(transport)) == SENDS)
    ids = [c.message.message_id for c in transport.commands() if c.type == pb.BaseCommand.MESSAGE]
    return cnx, transport, ids


def unacked(service: BrokerService) -> int:
    (consumer,) = service.topics[TOPIC].subscriptions["s"].dispatcher.consumers
    return len(consumer.pending)


def test_an_ack_of_a_thousand_ids_is_handled_a_slice_per_turn(tmp_path):
    async def scenario(service: BrokerService) -> None:
        cnx, _, ids = await consuming(service)
        cnx.data_received(client_commands.ack(1, ids))
        assert unacked(service) == SENDS - WORK_PER_TURN  # the rest in later turns
        assert await wait_for_async(lambda: unacked(service) == 0)
        assert service.topics[TOPIC].subscriptions["s"].backlog() == 0

    asyncio.run(with_service(tmp_path, scenario))


def test_an_ack_that_asks_for_an_answer_stays_whole(tmp_path):
    async def scenario(service: BrokerService) -> None:
        cnx, transport, ids = await consuming(service)
        ack = pb.BaseCommand(type=pb.BaseCommand.ACK, ack=pb.CommandAck(
            consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=ids, request_id=7))
        cnx.data_received(encode_command(ack))
        assert unacked(service) == 0
        assert await wait_for_async(lambda: any(c.type == pb.BaseCommand.ACK_RESPONSE for c in transport.commands()))
        (answer,) = [c.ackResponse for c in transport.commands() if c.type == pb.BaseCommand.ACK_RESPONSE]
        assert answer.request_id == 7 and not answer.HasField("error")

    asyncio.run(with_service(tmp_path, scenario))
