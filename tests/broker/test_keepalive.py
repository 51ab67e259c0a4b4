"""Keep-alive: the broker pings, drops peers that stop answering, and answers pings.

As in Pulsar's PulsarHandler.handleKeepAliveTimeout: every interval, a connection
whose handshake is not complete is closed; one that has not answered the last
PING (no frame at all since) is closed; otherwise a PING goes out.
"""

from __future__ import annotations

import socket
import time

import pytest
from rawclient import RawClient

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
INTERVAL = 1


@pytest.fixture
def fast_broker(broker_factory):
    return broker_factory(f"keepAliveIntervalSeconds={INTERVAL}")


#: How long a test waits for what keep-alive does within a few intervals: generous, since a
#: loaded machine delays it, and the reason logged says it was keep-alive that acted.
PATIENCE = 30 * INTERVAL


def test_silent_peer_is_closed_for_not_answering_a_ping(fast_broker):
    raw = RawClient(fast_broker.url)
    raw.connect()
    first = raw.next_frame(PATIENCE, skip_pings=False)
    assert first is not None and first.command.type == T.PING
    assert raw.closed_by_peer(PATIENCE, answer_pings=False)
    raw.close()
    assert f"did not answer a ping within {INTERVAL}s; closing" in fast_broker.log()


def test_peer_that_answers_pings_stays_open(fast_broker):
    raw = RawClient(fast_broker.url)
    raw.connect()
    pings = 0
    deadline = time.monotonic() + 4 * INTERVAL
    while time.monotonic() < deadline:
        try:
            frame = raw.next_frame(deadline - time.monotonic(), skip_pings=False)
        except TimeoutError:
            break
        assert frame is not None, "broker closed a connection that answers its pings"
        assert frame.command.type == T.PING
        pings += 1
        raw.command(T(type=T.PONG, pong=pb.CommandPong()))
    assert pings >= 2
    raw.ping()
    raw.close()


def test_broker_answers_ping_with_pong(broker):
    raw = RawClient(broker.url)
    raw.connect()
    for _ in range(3):
        raw.ping()
    raw.close()


@pytest.mark.parametrize("sent", [b"", b"\x00\x00\x00"], ids=["nothing", "partial-frame"])
def test_handshake_not_completed_is_closed(fast_broker, sent):
    raw = RawClient(fast_broker.url)
    raw.write(sent)
    assert raw.closed_by_peer(PATIENCE, answer_pings=False)
    raw.close()
    assert f"did not complete the handshake within {INTERVAL}s; closing" in fast_broker.log()


def test_official_client_survives_fast_keepalive(fast_broker, client_factory):
    client = client_factory(fast_broker.url)
    producer = client.create_producer("keepalive")
    consumer = client.subscribe("keepalive", "sub")
    producer.send(b"before")
    deadline = time.monotonic() + 4 * INTERVAL
    while time.monotonic() < deadline:  # idle for several intervals, watching the connection
        assert producer.is_connected() and consumer.is_connected()
        time.sleep(0.05)
    producer.send(b"after")
    assert [consumer.receive(10000).data() for _ in range(2)] == [b"before", b"after"]
    assert "did not answer a ping" not in fast_broker.log()


def test_half_open_socket_does_not_block_others(fast_broker, client_factory):
    """A peer that vanishes without FIN (we just stop reading) is reaped by keep-alive."""
    raw = RawClient(fast_broker.url)
    raw.connect()
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    producer = client_factory(fast_broker.url).create_producer("bystander")
    assert raw.closed_by_peer(PATIENCE, answer_pings=False)
    producer.send(b"fine")
    raw.close()
