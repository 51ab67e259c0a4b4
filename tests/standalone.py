"""Start real `magnetar standalone` processes for integration tests.

The broker binds port 0 (no race for a free port) and logs the URL it got;
tests wait for that line with a deadline instead of sleeping.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# the first URL of the line: pulsar:// when that port is on, else pulsar+ssl://
READY = re.compile(r"accepting connections on (pulsar(?:\+ssl)?://[\d.]+:(\d+))")
TLS_READY = re.compile(r"accepting connections on .*?(pulsar\+ssl://[\d.]+:\d+)")
ADMIN = re.compile(r"admin API on (http://[\d.]+:\d+)")
ADMIN_TLS = re.compile(r"admin API on (https://[\d.]+:\d+)")
START_TIMEOUT = 30.0
NO_ENTRY_METADATA = ("brokerEntryMetadataInterceptors=", "exposingBrokerEntryMetadataToClientEnabled=false")
"""Pulsar's broker defaults for PIP-70 (entries stored without the prefix, none sent to clients),
which `magnetar standalone` turns on: for tests about a broker without it."""


@dataclass
class Standalone:
    data_dir: Path
    config: list[str] = field(default_factory=list)
    port: int = 0
    args: list[str] = field(default_factory=list)  # further command-line arguments (--config ...)
    env: dict[str, str] = field(default_factory=dict)  # further environment (PULSAR_PREFIX_...)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    url: str = ""
    admin_url: str = ""
    tls_url: str = ""
    admin_tls_url: str = ""
    plaintext: bool = True  # False: no --port/--http-port flags, so `brokerServicePort=` can turn them off
    log_dir: Path | None = None  # where the log goes (default: beside the data dir); elsewhere for a disk let fill
    file_size_limit: int | None = None  # RLIMIT_FSIZE: writes past it fail with EFBIG, a failure that is not space

    def start(self) -> Standalone:
        log_dir = self.log_dir or self.data_dir.parent
        self.log_path = log_dir / f"{self.data_dir.name}-broker-{time.monotonic_ns()}.log"
        args = [sys.executable, "-m", "magnetar", "standalone", "--data-dir", str(self.data_dir)]
        if self.plaintext:
            args += ["--port", str(self.port), "--http-port", "0"]
        for item in self.config:
            args += ["-c", item]
        args += self.args
        with open(self.log_path, "wb") as log_file:
            self.proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
                                         preexec_fn=self._limit_file_size if self.file_size_limit else None)  # noqa: PLW1509 (setrlimit only)
        self.url = self._wait_ready()
        self.port = int(self.url.rsplit(":", 1)[1])
        log = self.log()
        found = (pattern.search(log) for pattern in (TLS_READY, ADMIN, ADMIN_TLS))
        self.tls_url, self.admin_url, self.admin_tls_url = (match.group(1) if match else "" for match in found)
        return self

    def _limit_file_size(self) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_size_limit, self.file_size_limit))

    def _wait_ready(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            match = READY.search(self.log())
            if match:
                return match.group(1)
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.02)
        raise TimeoutError(f"broker not ready within {START_TIMEOUT}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> Standalone:
        self.stop()
        return self.start()


def run_standalone(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a standalone expected to refuse to start; its exit code and message are the result."""
    return subprocess.run(
        [sys.executable, "-m", "magnetar", "standalone", "--port", "0", "--http-port", "0", *args],
        capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **(env or {})},
    )
