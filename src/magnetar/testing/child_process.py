"""A test broker as a `magnetar standalone` child process.

Slower to start than one in a thread (a second interpreter imports the broker), but apart:
a broker that crashes or hangs does not take the test process with it, and `kill()` ends it
with SIGKILL, as a power cut would, for tests of what survives that.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from magnetar.testing.harness import STOP_TIMEOUT_SECONDS, Listening, StandaloneBroker

if TYPE_CHECKING:
    from magnetar.broker.config.loading import LoadedConfiguration

# the command's own log lines (cli/standalone.py): the admin API's come first
_ACCEPTING = re.compile(r"accepting connections on (\S+(?: and \S+)?) \(data in ")
_ADMIN = re.compile(r"admin API on (\S+)/admin/v2")
_LOG_TAIL_LINES = 40
_ENVIRONMENT_PREFIX = "PULSAR_PREFIX_"
_READY_POLL_SECONDS = 0.02


class ChildProcessBroker(StandaloneBroker):
    """Its output goes to `log_path` (in the temporary directory), read by `log()`."""

    _proc: subprocess.Popen[bytes] | None = None
    _killed = False

    @property
    def log_path(self) -> str:
        assert self._temp_dir is not None, "not started"
        return str(self._temp_dir / "broker.log")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def log(self) -> str:
        """Everything the broker logged, over all its starts."""
        try:
            with open(self.log_path, "rb") as file:
                return file.read().decode(errors="replace")
        except (OSError, AssertionError):
            return ""

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye; `restart()` (or `start()`) then recovers the data."""
        if self._proc is not None and self.running:
            self._proc.kill()
            self._proc.wait()
            self._killed = True
            self._listening = None

    def _start(self, loaded: LoadedConfiguration) -> Listening:
        # `loaded` has checked the configuration here, so a bad key fails as it does in a
        # thread; the child reads the same items from its command line.
        args = [sys.executable, "-m", "magnetar", "standalone", "--data-dir", str(self.data_dir)]
        for item in self.command_line_items():
            args += ["-c", item]
        environment = {name: value for name, value in os.environ.items() if not name.startswith(_ENVIRONMENT_PREFIX)}
        with open(self.log_path, "ab") as log_file:
            offset = log_file.tell()
            self._proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT,
                                          env={**environment, "PYTHONUNBUFFERED": "1"})
        self._killed = False
        try:
            return self._wait_listening(offset)
        except BaseException:
            self._proc.kill()
            self._proc.wait()
            raise

    def _wait_listening(self, offset: int) -> Listening:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            text = self.log()[offset:]
            accepting = _ACCEPTING.search(text)
            if accepting:
                return Listening.from_urls(accepting.group(1).split(" and "), _ADMIN.findall(text))
            if self._proc.poll() is not None:
                raise RuntimeError(f"the broker exited with {self._proc.returncode}:\n{self._log_tail()}")
            time.sleep(_READY_POLL_SECONDS)
        raise TimeoutError(f"the broker did not start within {self.start_timeout} s:\n{self._log_tail()}")

    def _stop(self) -> None:
        proc = self._proc
        if proc is None or self._killed:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            message = f"the broker did not stop within {STOP_TIMEOUT_SECONDS} s:\n{self._log_tail()}"
            raise TimeoutError(message) from None
        if code != 0:
            raise RuntimeError(f"the broker did not stop cleanly (exit code {code}):\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return "\n".join(self.log().splitlines()[-_LOG_TAIL_LINES:])

