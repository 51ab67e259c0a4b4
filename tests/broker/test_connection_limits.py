"""Connections cannot hold the broker's memory or slots for as long as they like."""

from __future__ import annotations

import re
import struct
import time

import pytest
from rawclient import RawClient
from test_bad_input import TOPIC, Traffic

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def closed(raw: RawClient, timeout: float) -> bool:
    """Wait up to `timeout` for the broker to close; what it sends (PINGs) is read and dropped."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        raw.sock.settimeout(left)
        try:
            if raw.sock.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except OSError:
            return True
    return False


def test_a_frame_trickled_byte_by_byte_is_cut_off(broker_factory, client_factory):
    broker = broker_factory("keepAliveIntervalSeconds=1")
    traffic = Traffic(client_factory(broker.url), TOPIC)
    try:
        raw = RawClient(broker.url)
        raw.connect()
        frame = struct.pack(">II", 1000, 996) + b"\x08" * 996
        deadline = time.monotonic() + 60  # generous: the cut-off comes after 2 keep-alive intervals
        for byte in frame:  # ~330 s to send it all: it must be cut off long before
            try:
                raw.write(bytes([byte]))
            except OSError:
                break
            if closed(raw, 0.3):
                break
            assert time.monotonic() < deadline, "a trickling connection was never closed"
        raw.close()
        # closed by keep-alive: bytes that never make a frame are no sign of life, so the PING
        # goes unanswered (or the frame stays unfinished for two intervals)
        assert re.search(r"(did not answer a ping|left a frame unfinished) .*; closing", broker.log())
        traffic.wait_progress()
    finally:
        traffic.stop()
    assert traffic.received == traffic.sent


def test_unfinished_frames_are_bounded_in_total(broker_factory, client_factory):
    broker = broker_factory("maxMessagePublishBufferSizeInMB=8")
    traffic = Traffic(client_factory(broker.url), TOPIC)
    holders: list[RawClient] = []
    try:
        traffic.wait_progress()
        baseline = rss_kib(broker.proc.pid)
        chunk = b"\x00" * (1 << 20)
        for _ in range(12):
            raw = RawClient(broker.url)
            raw.connect()
            raw.sock.settimeout(0.5)  # a paused connection stops taking bytes: don't block on it
            try:
                raw.write(struct.pack(">I", 5 * 1024 * 1024))
                for _ in range(4):
                    raw.write(chunk)
            except TimeoutError:
                pass
            holders.append(raw)
            traffic.wait_progress(5)
        grown = rss_kib(broker.proc.pid) - baseline
        # 12 connections x 4 MiB would be 48 MiB; the budget allows 8 plus one frame.
        assert grown < 24 * 1024, f"RSS grew by {grown} KiB"
    finally:
        for raw in holders:
            raw.close()
        traffic.stop()
    assert traffic.received == traffic.sent


@pytest.mark.parametrize("setting", ["brokerMaxConnectionsPerIp=3", "brokerMaxConnections=3"])
def test_connection_caps(broker_factory, setting):
    broker = broker_factory(setting)
    admitted = [RawClient(broker.url) for _ in range(3)]
    for raw in admitted:
        raw.connect()
    refused = RawClient(broker.url)
    assert refused.closed_by_peer(5), "a fourth connection was kept"
    refused.close()
    admitted.pop().close()
    deadline = time.monotonic() + 10
    while True:  # the slot is freed once the broker has seen the close
        again = RawClient(broker.url)
        try:
            again.connect()
            break
        except (AssertionError, OSError):
            again.close()
            assert time.monotonic() < deadline, "the freed slot never came back"
            time.sleep(0.05)
    again.ping()
    for raw in [*admitted, again]:
        raw.ping()
        raw.close()
    assert "refusing connections" in broker.log()
