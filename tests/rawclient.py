"""A blocking raw-socket peer that speaks frames built with magnetar.wire.

For protocol abuse the official client will not commit: garbage, oversized
frames, corrupted checksums, commands out of order. Every read has a deadline.
"""

from __future__ import annotations

import socket
import time

from magnetar.wire.entry import build_entry
from magnetar.wire.frames import Frame, FrameDecoder, encode_command, encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
DEADLINE = 10.0


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("pulsar://").rsplit(":", 1)
    return host, int(port)


def send_frame(producer_id: int, sequence_id: int, payload: bytes, *, producer_name: str = "raw",
               corrupt: bool = False) -> bytes:
    """A SEND frame with a CRC32C; `corrupt` flips a payload byte after the CRC was computed."""
    metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id,
                                  publish_time=int(time.time() * 1000))
    entry = bytearray(build_entry(metadata, payload))
    if corrupt:
        entry[-1] ^= 0xFF
    send = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    return encode_payload_command(T(type=T.SEND, send=send), bytes(entry))


class RawClient:
    def __init__(self, url: str) -> None:
        self.sock = socket.create_connection(_host_port(url), timeout=DEADLINE)
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.frames: list[Frame] = []
        self.eof = False

    def close(self) -> None:
        self.sock.close()

    # -- writing
    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, cmd: T, entry: bytes | None = None) -> None:
        self.write(encode_command(cmd) if entry is None else encode_payload_command(cmd, entry))

    def connect(self, auth_method: str | None = None, auth_data: bytes = b"") -> pb.CommandConnected:
        connect = pb.CommandConnect(client_version="raw", protocol_version=20)
        if auth_method is not None:
            connect.auth_method_name, connect.auth_data = auth_method, auth_data
        self.command(T(type=T.CONNECT, connect=connect))
        return self.expect(T.CONNECTED).connected

    def create_producer(self, topic: str, producer_id: int = 0, request_id: int = 0) -> str:
        self.command(T(type=T.PRODUCER, producer=pb.CommandProducer(
            topic=topic, producer_id=producer_id, request_id=request_id)))
        return self.expect(T.PRODUCER_SUCCESS).producer_success.producer_name

    def ping(self) -> None:
        """PING and wait for the PONG: proof the broker still serves this connection."""
        self.command(T(type=T.PING, ping=pb.CommandPing()))
        self.expect(T.PONG)

    def send(self, producer_id: int, sequence_id: int, payload: bytes, *, producer_name: str = "raw",
             corrupt: bool = False) -> None:
        self.write(send_frame(producer_id, sequence_id, payload, producer_name=producer_name, corrupt=corrupt))

    # -- reading
    def _fill(self, deadline: float) -> bool:
        """Read once; False on EOF/reset (the broker closed us)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no frame before the deadline")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(1 << 20)
        except TimeoutError:
            raise TimeoutError("no frame before the deadline") from None
        except (ConnectionResetError, BrokenPipeError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.frames.extend(self.decoder.feed(data))
        return True

    def next_frame(self, timeout: float = DEADLINE, *, skip_pings: bool = True) -> Frame | None:
        """The next frame (None on EOF); broker PINGs are answered and skipped."""
        deadline = time.monotonic() + timeout
        while True:
            while self.frames:
                frame = self.frames.pop(0)
                if skip_pings and frame.command.type == T.PING:
                    self.command(T(type=T.PONG, pong=pb.CommandPong()))
                    continue
                return frame
            if self.eof or not self._fill(deadline):
                return None

    def expect(self, kind: int, timeout: float = DEADLINE) -> T:
        frame = self.next_frame(timeout)
        assert frame is not None, f"connection closed while waiting for {T.Type.Name(kind)}"
        assert frame.command.type == kind, f"expected {T.Type.Name(kind)}, got {frame.command}"
        return frame.command

    def closed_by_peer(self, timeout: float = DEADLINE, *, answer_pings: bool = True) -> bool:
        """Whether the broker closes this connection within `timeout` (frames are discarded)."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                frame = self.next_frame(deadline - time.monotonic(), skip_pings=answer_pings)
                if frame is None:
                    return True
        except TimeoutError:
            return False
