"""File descriptors: a broker with many topics holds a bounded number of ledger files, raises
its soft open-files limit at start-up, and backs off quietly when accept() runs out of them."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import socket
import time
from pathlib import Path

import pulsar
from admin_http import get_json, http_get
from polling import wait_for

TOPICS = 100
MESSAGES = 7
MAX_OPEN_FILES = 16
OTHER_FDS = 40
"""Descriptors a broker holds besides ledger files: stdio, the event loop, listening sockets,
the client's connection, the metadata store (db, WAL, shm) and LOCK measured about 20. One
ledger file per topic would already be 100 more; the two a topic being written used to hold,
200."""


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def ledger_fd_count(pid: int, data_dir: Path) -> int:
    ledgers = str(data_dir / "managed-ledgers")
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith(ledgers)
    return count


def loaded_topics(broker) -> str:
    """/metrics, which has a line for each topic the broker has loaded."""
    return http_get(f"{broker.admin_url}/metrics")[2].decode()


def topic(i: int) -> str:
    return f"persistent://public/default/many-{i}"


def message(i: int, j: int) -> bytes:
    return f"topic {i} message {j} ".encode() * (j + 1)


def check_topics_readable_and_fds_bounded(client: pulsar.Client, broker) -> None:
    for i in range(TOPICS):
        reader = client.create_reader(topic(i), pulsar.MessageId.earliest)
        assert [reader.read_next(10000).data() for _ in range(MESSAGES)] == [message(i, j) for j in range(MESSAGES)]
        reader.close()
        assert ledger_fd_count(broker.proc.pid, broker.data_dir) <= MAX_OPEN_FILES
    assert fd_count(broker.proc.pid) <= MAX_OPEN_FILES + OTHER_FDS


def test_fds_stay_bounded_with_many_topics_and_after_a_restart(broker_factory, client_factory):
    broker = broker_factory(f"managedLedgerMaxOpenFiles={MAX_OPEN_FILES}", "managedLedgerMaxEntriesPerLedger=3",
                            "managedLedgerMinLedgerRolloverTimeMinutes=0")
    client = client_factory(broker.url)
    for i in range(TOPICS):
        producer = client.create_producer(topic(i), batching_enabled=False)
        for j in range(MESSAGES):
            producer.send(message(i, j))
        producer.close()
        assert ledger_fd_count(broker.proc.pid, broker.data_dir) <= MAX_OPEN_FILES
    assert fd_count(broker.proc.pid) <= MAX_OPEN_FILES + OTHER_FDS
    check_topics_readable_and_fds_bounded(client, broker)
    client.close()

    broker.restart()  # start-up loads every stored topic, reading each one's last entry
    deadline = time.monotonic() + 20
    while sum(f"many-{i}\"" in loaded_topics(broker) for i in range(TOPICS)) < TOPICS:
        assert time.monotonic() < deadline, "stored topics not loaded"
        time.sleep(0.1)
    assert ledger_fd_count(broker.proc.pid, broker.data_dir) <= MAX_OPEN_FILES
    assert fd_count(broker.proc.pid) <= MAX_OPEN_FILES + OTHER_FDS
    check_topics_readable_and_fds_bounded(client_factory(broker.url), broker)


def open_files_limits(pid: int) -> tuple[int, int]:
    limits = Path(f"/proc/{pid}/limits").read_text()
    soft, hard = re.search(r"^Max open files\s+(\d+)\s+(\d+)", limits, re.MULTILINE).groups()
    return int(soft), int(hard)


def test_soft_open_files_limit_is_raised_to_the_hard_limit(broker_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard // 2), hard))  # inherited by the broker
    try:
        broker = broker_factory()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert open_files_limits(broker.proc.pid) == (hard, hard)
    assert broker.log().count(f"open files limit (RLIMIT_NOFILE): {hard}") == 1


def test_accept_backs_off_and_reports_once_when_out_of_fds(broker_factory, client_factory):
    broker = broker_factory()
    pid = broker.proc.pid
    _, hard = open_files_limits(pid)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (fd_count(pid) + 5, hard))
    held = []
    try:
        for _ in range(30):  # 5 are accepted, the others wait in the listen backlog
            held.append(socket.create_connection(("127.0.0.1", broker.port), timeout=5))
        assert wait_for(lambda: "cannot accept connections" in broker.log()), broker.log()[-3000:]

        def more_reports() -> bool:
            log = broker.log()
            return log.count("cannot accept connections") > 1 or "socket.accept() out of system resource" in log
        # asyncio retries every second: several failed rounds, and still the one report
        assert not wait_for(more_reports, timeout=3.5), broker.log()[-3000:]
    finally:
        for sock in held:
            sock.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (hard, hard))
    client = client_factory(broker.url)  # descriptors are free again: the broker accepts
    producer = client.create_producer("after-emfile")
    producer.send(b"accepted again")
    assert get_json(f"{broker.admin_url}/admin/v2/persistent/public/default")
    assert broker.stop() == 0
