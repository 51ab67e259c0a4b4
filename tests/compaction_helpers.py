"""Helpers for compaction tests: trigger over the admin API and wait with a deadline, read
the stored compacted ledger from a stopped broker's data dir, drain readers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import quote

import pulsar
from admin_http import http

from magnetar.storage import ManagedLedgerFactory, Position
from magnetar.storage.compacted_ledger import CompactedLedgerStore

NS = "public/default"
#: A compacted batch's dropped slot, by the protobuf encoding rules rather than from the code:
#: [size = 4][SingleMessageMetadata: payload_size (field 3) = 0, compacted_out (field 4) = true].
PLACEHOLDER = b"\x00\x00\x00\x04" + b"\x18\x00" + b"\x20\x01"


def topic_path(admin_url: str, topic: str) -> str:
    return f"{admin_url}/admin/v2/persistent/{NS}/{quote(topic, safe='')}"


def status(admin_url: str, topic: str) -> dict:
    code, _, body = http("GET", topic_path(admin_url, topic) + "/compaction")
    assert code == 200, (code, body)
    return json.loads(body)


def compact(admin_url: str, topic: str, timeout: float = 60.0) -> dict:
    """PUT .../compaction, then poll its status until it leaves RUNNING."""
    code, _, body = http("PUT", topic_path(admin_url, topic) + "/compaction", b"")
    assert code == 204, (code, body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = status(admin_url, topic)
        if current["status"] != "RUNNING":
            assert current["status"] == "SUCCESS", current
            return current
        time.sleep(0.05)
    raise TimeoutError(f"compaction of {topic} still running after {timeout}s")


def drain(reader: pulsar.Reader, timeout_ms: int = 10000) -> list[pulsar.Message]:
    """The has_message_available loop: it must end, and every read must succeed."""
    got = []
    deadline = time.monotonic() + 60
    while reader.has_message_available():
        assert time.monotonic() < deadline, "has_message_available never turned false"
        got.append(reader.read_next(timeout_ms))
    return got


def kv(messages: list[pulsar.Message]) -> list[tuple[str, bytes]]:
    return [(m.partition_key(), m.data()) for m in messages]


def stored_compacted(data_dir: Path, topic: str) -> list[tuple[Position, bytes]]:
    """The compacted ledger in force, read with a read-only factory (safe beside a running broker)."""
    with ManagedLedgerFactory(data_dir, read_only=True) as factory:
        store = CompactedLedgerStore(factory, f"{NS}/persistent/{topic}")
        current = store.current
        assert current is not None, "no compacted ledger"
        try:
            return current.read(0, current.entries)
        finally:
            store.close()
