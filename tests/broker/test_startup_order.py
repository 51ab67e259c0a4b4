"""The binary port serves Pulsar clients while the admin API's code is still loading.

A standalone loads the admin API (magnetar.admin and its HTTP server: about a fifth of a start's CPU)
in a thread once its binary listener is up, and logs "binary protocol listener ready" then. The
line must not be a promise: here the child process holds the import of
magnetar.admin.server until the test says so (on its stdin), and a real client produces
and consumes in that window. A broker that imported the admin API before listening would
never log the line; one that loaded it on the event loop would leave the client waiting.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from polling import wait_for

BINARY_READY = re.compile(r"binary protocol listener ready on (pulsar://[\d.]+:\d+) \(admin API starting\)")
ADMIN = re.compile(r"admin API on (http://[\d.]+:\d+)")
HELD = "admin API import held"

# The real command line, with the admin server's module held before it runs: its loader
# waits for a line on stdin (under the module's own import lock, so the broker's other
# imports go on).
HOLDING_CHILD = f"""
import importlib.abc, importlib.machinery, sys
import magnetar.admin

class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "magnetar.admin.server":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def held(module):
            print("{HELD}", file=sys.stderr, flush=True)
            sys.stdin.readline()
            run(module)
        spec.loader.exec_module = held
        return spec

sys.meta_path.insert(0, Hold())
from magnetar.cli import main
sys.exit(main(["standalone", *sys.argv[1:]]))
"""


class Child:
    def __init__(self, tmp_path: Path) -> None:
        self.log_path = tmp_path / "broker.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", HOLDING_CHILD, "--data-dir", str(tmp_path / "data"), "--port", "0",
                 "--http-port", "0"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        assert wait_for(lambda: pattern.search(self.log()) or self.proc.poll() is not None, timeout=30), self.log()
        match = pattern.search(self.log())
        assert match, self.log()
        return match

    def release_admin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.close()


@pytest.fixture
def child(tmp_path) -> Iterator[Child]:
    child = Child(tmp_path)
    try:
        yield child
    finally:
        if child.proc.stdin is not None and not child.proc.stdin.closed:
            child.proc.stdin.close()
        child.proc.send_signal(signal.SIGTERM)
        child.proc.wait(30)


def test_pulsar_clients_are_served_while_the_admin_api_loads(child):
    url = child.wait_for_line(BINARY_READY).group(1)
    child.wait_for_line(re.compile(HELD))
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        topic = "persistent://public/default/served-early"
        consumer = client.subscribe(topic, "early")
        producer = client.create_producer(topic)
        for n in range(20):
            producer.send_async(f"m-{n}".encode(), None)
        producer.flush()
        received = [consumer.receive(10_000) for _ in range(20)]
        assert [message.data() for message in received] == [f"m-{n}".encode() for n in range(20)]
    finally:
        client.close()
    assert not ADMIN.search(child.log()), "the admin API was up: nothing was tested"
    child.release_admin()
    admin = child.wait_for_line(ADMIN).group(1)
    child.wait_for_line(re.compile("accepting connections on "))
    with urllib.request.urlopen(f"{admin}/admin/v2/clusters", timeout=10) as response:
        assert response.read() == b'["standalone"]'
