"""Kafka-listening brokers and a raw Kafka-protocol client for tests/kafka.

A module of its own rather than conftest.py: test files import these by name, and a bare
`from conftest import ...` takes whichever conftest an xdist worker imported first.
"""

from __future__ import annotations

import re
import socket
import struct
from pathlib import Path

from standalone import Standalone

from magnetar.kafka.protocol.messages import decode_response, encode_request

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")


class KafkaStandalone(Standalone):
    kafka_port: int = 0

    def start(self) -> KafkaStandalone:
        super().start()
        self.kafka_port = int(KAFKA_READY.findall(self.log())[-1])
        return self

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"


def start_kafka_broker(data_dir: Path, *config: str) -> KafkaStandalone:
    return KafkaStandalone(data_dir, list(config), args=["--kafka", "0"]).start()


class RawKafka:
    """A Kafka connection speaking through magnetar's codec, for what real clients never send."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self._correlation = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive_frame(self) -> bytes | None:
        """The next response frame, or None once the broker has closed the connection."""
        head = self._read(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._read(size)

    def _read(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, api_key: int, version: int, body) -> object:
        self._correlation += 1
        self.send_raw(encode_request(api_key, version, self._correlation, "raw", body))
        frame = self.receive_frame()
        assert frame is not None, "the broker closed the connection"
        correlation, response = decode_response(frame, api_key, version)
        assert correlation == self._correlation
        return response

    def close(self) -> None:
        self.sock.close()
