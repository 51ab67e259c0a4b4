"""magnetar.client's connection sends what one turn of the loop wrote in one write (the
frames of a commit, a NEW_TXN and a batch from many producers cost one system call, not
one each), in the order written, and a close sends what was written before it; a
transaction whose partition registration was refused takes no more messages, through a
scripted stub broker."""

from __future__ import annotations

import asyncio

from polling import wait_for_async
from test_connection import Stub, serve_producer_setup

from magnetar.client import errors
from magnetar.client.aio import Client
from magnetar.client.aio.connection import Connection, in_one_write
from magnetar.client.enums import Result
from magnetar.wire import client_commands as cc
from magnetar.wire import commands
from magnetar.wire import txn as wire_txn
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import TxnId

T = pb.BaseCommand


def _ignore(_stub, _cmd, _write):
    return None


async def _open(stub: Stub) -> tuple[Connection, list[list[bytes]]]:
    """A connection to the stub, and every call its transport gets (one list of frames each)."""
    port = int(stub.url.rsplit(":", 1)[1])
    conn = await Connection.open(stub.url, stub.url, "127.0.0.1", port, operation_timeout=5, connection_timeout=5)
    transport = conn._transport
    calls: list[list[bytes]] = []
    write = transport.write

    def one(data):
        calls.append([bytes(data)])
        write(data)

    def many(frames):
        frames = [bytes(frame) for frame in frames]
        calls.append(frames)
        write(b"".join(frames))  # what the selector transport's writelines does

    transport.write, transport.writelines = one, many
    return conn, calls


def test_the_frames_of_one_turn_leave_in_one_write_in_order():
    async def scenario():
        async with Stub(_ignore, answer_pings=False) as stub:
            conn, calls = await _open(stub)
            frames = [cc.ping(), cc.pong(), cc.ping()]
            for frame in frames:
                conn.write(frame)
            assert calls == []  # held to the end of the turn
            assert await wait_for_async(lambda: calls, timeout=5)
            assert calls == [frames]
            assert await wait_for_async(lambda: [c.type for c in stub.seen[1:]] == [T.PING, T.PONG, T.PING], timeout=5)
            conn.write(cc.pong())  # a later turn: a write of its own
            assert await wait_for_async(lambda: len(calls) == 2, timeout=5)
            assert calls[1] == [cc.pong()]
            conn.close()

    asyncio.run(scenario())


def test_a_close_sends_what_was_written_before_it():
    async def scenario():
        async with Stub(_ignore, answer_pings=False) as stub:
            conn, _calls = await _open(stub)
            conn.write(cc.ping())
            conn.write(cc.pong())
            conn.close()
            assert await wait_for_async(lambda: [c.type for c in stub.seen[1:]] == [T.PING, T.PONG], timeout=5)

    asyncio.run(scenario())


def _coordinator_refusing_registrations(stub, cmd, write, refuse=True):
    """One coordinator; every ADD_PARTITION_TO_TXN refused (unless not `refuse`); everything else answered."""
    if cmd.type == T.PARTITIONED_METADATA and cmd.partitionMetadata.topic.endswith(wire_txn.COORDINATOR_ASSIGN_TOPIC):
        write(commands.partitioned_metadata_response(cmd.partitionMetadata.request_id, 1))
    elif serve_producer_setup(stub, cmd, write, last_sequence_id=-1):
        return
    elif cmd.type == T.TC_CLIENT_CONNECT_REQUEST:
        write(wire_txn.txn_response(cmd.type, cmd.tcClientConnectRequest.request_id))
    elif cmd.type == T.NEW_TXN:
        write(wire_txn.txn_response(cmd.type, cmd.newTxn.request_id, TxnId(0, 1)))
    elif cmd.type == T.ADD_PARTITION_TO_TXN:
        write(wire_txn.txn_response(cmd.type, cmd.addPartitionToTxn.request_id, TxnId(0, 1),
                                    *((pb.TransactionConflict, "refused by the stub") if refuse else ())))
    elif cmd.type == T.END_TXN:
        write(wire_txn.txn_response(cmd.type, cmd.endTxn.request_id, TxnId(0, 1)))
    elif cmd.type == T.SEND:
        first = cmd.send.sequence_id
        last = first + max(cmd.send.num_messages, 1) - 1
        write(commands.send_receipt(cmd.send.producer_id, first, 7, first, last))


def test_a_refused_registration_fails_the_transactions_later_sends():
    """The first send registers the partition without waiting; once the coordinator refused
    it, every later send in the transaction fails at once and the commit aborts instead."""

    async def scenario():
        async with Stub(_coordinator_refusing_registrations) as stub, \
                Client(stub.url, operation_timeout_seconds=5, enable_transaction=True) as client:
            producer = await client.create_producer("t", batching_enabled=False)
            txn = await client.new_transaction()
            results: list[Result] = []

            def refused() -> bool:
                """Another send: refused at once once the refusal is known (else answered later)."""
                told: list[Result] = []
                producer.send_async(b"m", lambda result, _id: told.append(result), txn=txn)
                results.extend(told)
                return told == [Result.TransactionConflict]

            assert not refused()  # the first registers the partition, and goes out
            assert await wait_for_async(refused, timeout=5)
            sends = sum(c.type == T.SEND for c in stub.seen)
            assert sends >= 1
            for _ in range(3):
                assert refused()  # every later one too, through the producer it went through
            assert sum(c.type == T.SEND for c in stub.seen) == sends
            try:
                await txn.commit()
            except errors.TransactionConflict:
                pass
            else:
                raise AssertionError("the commit went through a refused registration")
            assert txn.state == "ABORTED"

    asyncio.run(scenario())


def test_a_large_frame_is_written_by_itself_in_its_place():
    """A turn's frames past the join limit are not copied into one buffer: each is written
    as it is, still in order (a chunked message's chunks are megabytes each)."""

    async def scenario():
        async with Stub(_ignore, answer_pings=False) as stub:
            conn, calls = await _open(stub)
            large = cc.send(1, 0, b"x" * (512 * 1024))
            frames = [cc.ping(), large, cc.pong()]
            for frame in frames:
                conn.write(frame)
            assert await wait_for_async(lambda: len(calls) == 3, timeout=5)
            assert calls == [[frame] for frame in frames]
            assert await wait_for_async(lambda: [c.type for c in stub.seen[1:]] == [T.PING, T.SEND, T.PONG],
                                        timeout=5)
            conn.close()

    asyncio.run(scenario())


def test_frames_reaching_the_send_threshold_leave_before_the_turn_ends():
    """A coroutine that produces in a loop without awaiting cuts batch after batch in one
    turn: once the held frames reach 64 KiB they leave at once, with those held before them
    and in their order, rather than all when the coroutine yields."""

    async def scenario():
        async with Stub(_ignore, answer_pings=False) as stub:
            conn, calls = await _open(stub)
            batch = cc.send(1, 0, b"x" * (80 * 1024))
            conn.write(cc.ping())
            conn.write(batch)
            assert calls == [[cc.ping(), batch]]  # still inside the turn
            conn.write(cc.pong())
            assert len(calls) == 1  # a small frame waits for the turn's end
            assert await wait_for_async(lambda: len(calls) == 2, timeout=5)
            assert calls[1] == [cc.pong()]
            assert await wait_for_async(lambda: [c.type for c in stub.seen[1:]] == [T.PING, T.SEND, T.PONG],
                                        timeout=5)
            conn.close()

    asyncio.run(scenario())


def _coordinator(stub, cmd, write):
    _coordinator_refusing_registrations(stub, cmd, write, refuse=False)


def test_a_batch_of_a_transaction_tells_each_callback_its_id_and_counts_the_rest():
    """A transaction's batch whose messages were sent without a callback is counted at once
    (no id made for each); one that mixes in callbacks tells each its own id, and the
    commit waits for all of them either way."""

    async def scenario():
        async with Stub(_coordinator) as stub, \
                Client(stub.url, operation_timeout_seconds=5, enable_transaction=True) as client:
            producer = await client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=60_000)
            told: list[tuple[int, int]] = []
            for mixed in (False, True):
                txn = await client.new_transaction()
                for i in range(10):
                    callback = (lambda result, message_id: told.append((result, message_id.batch_index()))) \
                        if mixed and i % 3 == 1 else None
                    producer.send_async(b"m", callback, txn=txn)
                await txn.commit()  # cuts the batch, waits for its receipt
                assert txn.state == "COMMITTED"
            assert told == [(Result.Ok, index) for index in (1, 4, 7)]
            assert [c.send.num_messages for c in stub.seen if c.type == T.SEND] == [10, 10]

    asyncio.run(scenario())


def test_a_burst_sends_its_frames_when_it_ends_after_what_the_turn_held_before_it():
    """in_one_write (the facade's drain): frames written in it leave when it returns; frames
    the turn wrote before it began are never overtaken (all leave together at the turn's end)."""
    async def scenario():
        async with Stub(_ignore, answer_pings=False) as stub:
            conn, calls = await _open(stub)
            in_one_write(lambda: (conn.write(cc.ping()), conn.write(cc.pong())))
            assert calls == [[cc.ping(), cc.pong()]]  # at once, not at the turn's end
            conn.write(cc.pong())
            in_one_write(lambda: conn.write(cc.ping()))
            assert len(calls) == 1  # held with the pong written before the burst
            assert await wait_for_async(lambda: len(calls) == 2, timeout=5)
            assert calls[1] == [cc.pong(), cc.ping()]
            conn.write(cc.ping())  # after a burst: the turn's write again
            assert len(calls) == 2
            assert await wait_for_async(lambda: len(calls) == 3, timeout=5)
            expected = [T.PING, T.PONG, T.PONG, T.PING, T.PING]
            assert await wait_for_async(lambda: [c.type for c in stub.seen[1:]] == expected, timeout=5)
            conn.close()

    asyncio.run(scenario())
