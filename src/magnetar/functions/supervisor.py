"""Instances as child processes (Pulsar's process runtime), started as the isolation in force
says (magnetar.functions.sandbox), their output read into the broker's log, their stats from
a pipe of their own, restarted with backoff when they die, stopped by a word on their stdin,
then SIGKILL. The check of a function's code at create and update runs the same bootstrap
on the same files, told to only load the code.

An instance runs the user's code, so everything read from it is bounded: lines are cut, logs
rate-limited, stats checked value by value; the broker never waits on it but in a task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.broker.auth.issued import IssuedCredentials
from magnetar.functions import stats
from magnetar.functions.config import ConfigError, FunctionConfig
from magnetar.functions.package import stored_name
from magnetar.functions.sandbox import Isolation
from magnetar.functions.store import Deployment

log = logging.getLogger("magnetar.functions")
STOP_GRACE_SECONDS = 5.0
END_GRACE_SECONDS = 1.0
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0
STABLE_SECONDS = 60.0
# (client.backoff.Backoff does the same doubling, but importing it loads the whole magnetar.client
# package into the broker at start-up, which tests/broker/test_startup_imports.py refuses)
"""An instance that ran this long before dying restarts after the first backoff again."""
MAX_LINE = 8192
"""A longer line of an instance's output is cut there."""
LOG_LINES_PER_SECOND, LOG_BURST = 200, 2000
"""What one instance may write to the broker's log; beyond it lines are counted, not logged."""
CHECK_OUTPUT_BYTES = 64 * 1024
"""What the worker keeps of a check's output (its end, where the reason is)."""
_READ_CHUNK = 64 * 1024
READ_AFTER_EXIT_SECONDS = 1.0
_UNPRINTABLE = {code: f"\\x{code:02x}" for code in (*range(32), 127) if code != 9}
"""Control characters an instance's output could forge log lines or terminal escapes with."""


@dataclass(frozen=True)
class Endpoints:
    """Where instances reach the broker and the worker's state API."""

    service_url: str
    admin_url: str


@dataclass(frozen=True)
class Launcher:
    """What every instance is started with: the broker's addresses, the isolation in force
    and, with authentication on, the registry of the credentials instances act with."""

    endpoints: Endpoints
    isolation: Isolation
    credentials: IssuedCredentials | None
    transactions: bool = False
    """The broker runs the transaction coordinator: EFFECTIVELY_ONCE instances use transactions."""

    async def spawn(self, code: Path, scratch: Path, config: FunctionConfig, handoff: dict[str, Any],
                    stats_fd: int | None = None) -> asyncio.subprocess.Process:
        """The bootstrap in a session of its own (no signal to the broker's process group
        reaches it), its output on one pipe, `handoff` on its stdin. Started from the event
        loop's thread, which lives as long as the broker: the parent-death signal follows
        the thread that started a process."""
        launch = self.isolation.launch(code, scratch, config.scratch_bytes)
        process = await asyncio.create_subprocess_exec(
            *launch.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=launch.env, cwd=launch.cwd,
            pass_fds=() if stats_fd is None else (stats_fd,))
        assert process.stdin is not None
        process.stdin.write(json.dumps({**handoff, "config": config.to_json(), "statsFd": stats_fd}).encode() + b"\n")
        with contextlib.suppress(ConnectionError):  # it died at once: its exit code tells
            await process.stdin.drain()
        return process


class InstanceProcess:
    """One instance: its process while it runs, its restart count, its last stats."""

    def __init__(self, deployment: Deployment, instance_id: int, home: FunctionHome, launcher: Launcher) -> None:
        self.deployment = deployment
        self.instance_id = instance_id
        self.home = home
        self.launcher = launcher
        self.process: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self.last_exit: str = ""
        self.counted: dict[str, Any] = {}
        self._task: asyncio.Task[None] | None = None
        self._spawn: asyncio.Future[asyncio.subprocess.Process] | None = None
        self._stopping = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def start(self) -> None:
        self._stopping = False
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name=f"fn-{self.label}")

    @property
    def label(self) -> str:
        return f"{self.deployment.config.fqfn}:{self.instance_id}"

    async def _supervise(self) -> None:
        backoff = BACKOFF_FIRST
        while not self._stopping:
            started = time.monotonic()
            try:
                code = await self._run_once()
            except OSError as error:  # the sandbox or Python could not start at all
                code, self.last_exit = -1, f"instance did not start: {error}"
            if self._stopping:
                return
            self.restarts += 1
            self.last_exit = self.last_exit if code == -1 else f"instance exited with code {code}"
            backoff = BACKOFF_FIRST if time.monotonic() - started > STABLE_SECONDS else backoff
            log.warning("function %s %s; restarting in %.0f s", self.label, self.last_exit, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _run_once(self) -> int:
        config = self.deployment.config
        scratch = await self.home.scratch(self.instance_id, self.launcher.isolation)
        credential = self._issue()
        stats_read, stats_write = os.pipe()
        readers: asyncio.Future[Any] | None = None
        try:
            handoff = {"instanceId": self.instance_id, "functionId": self.deployment.function_id,
                       "functionVersion": str(self.deployment.version), "credential": credential,
                       "serviceUrl": self.launcher.endpoints.service_url,
                       "stateUrl": self.launcher.endpoints.admin_url, "carried": self.counted,
                       "transactions": self.launcher.transactions and config.processingGuarantees == "EFFECTIVELY_ONCE"}
            # a task of its own, never cancelled: a bubblewrap killed while it sets the sandbox up may leave
            # the sandbox running (its child arms the parent-death signal a moment later); stop() waits for it
            self._spawn = asyncio.ensure_future(self.launcher.spawn(self.home.code, scratch, config, handoff,
                                                                    stats_write))
            self.process = await asyncio.shield(self._spawn)
            os.close(stats_write)
            stats_write = -1
            log.info("function %s started (pid %d, %s)", self.label, self.process.pid, config.processingGuarantees)
            assert self.process.stdout is not None
            logger = logging.getLogger(f"magnetar.functions.{config.fqfn}")
            readers = asyncio.gather(_forward(self.process.stdout, logger, self.instance_id),
                                     self._read_stats(stats_read))
            stats_read = -1
            code = await self.process.wait()
            # what it wrote last; a child of its own that keeps the pipes open is not waited for
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(readers, READ_AFTER_EXIT_SECONDS)
            return code
        finally:
            if readers is not None:
                if not readers.done():  # stopped meanwhile
                    readers.cancel()
                readers.add_done_callback(_outcome_seen)
            for fd in (stats_read, stats_write):
                if fd >= 0:
                    os.close(fd)
            if credential is not None and self.launcher.credentials is not None:
                self.launcher.credentials.revoke(credential)

    def _issue(self) -> str | None:
        """A credential for this process alone, acting as the role that deployed the function
        (none with authentication off; none either for a deployment that names no role, whose
        instance then connects as nobody and is refused)."""
        role = self.deployment.role
        if self.launcher.credentials is None or role is None:
            return None
        return self.launcher.credentials.issue(role, self.label)

    async def _read_stats(self, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_READ_CHUNK)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(fd, "rb", 0))
        try:
            async for line, whole in _lines(reader):
                snapshot = stats.parse(line) if whole else None
                if snapshot is not None:
                    self.counted = snapshot
        finally:
            transport.close()

    async def stop(self) -> None:
        self._stopping = True
        if self._spawn is not None and not self._spawn.done():  # let it start, then ask it to stop
            with contextlib.suppress(Exception):
                self.process = await asyncio.shield(self._spawn)
        process = self.process
        if process is not None and process.returncode is None:
            assert process.stdin is not None
            with contextlib.suppress(ConnectionError, RuntimeError):
                process.stdin.write(b"stop\n")
                await process.stdin.drain()
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), STOP_GRACE_SECONDS)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):  # its group, while its leader is not reaped
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            log.info("function %s stopped (exit code %d)", self.label, process.returncode)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def status(self) -> dict[str, Any]:
        """pulsar-admin's per-instance status, from the stats the instance last sent."""
        counted = self.counted
        stopped = self.instance_id in self.deployment.stopped
        error = "" if self.running or stopped else self.last_exit
        return {
            "running": self.running, "error": error, "numRestarts": self.restarts,
            "numReceived": counted.get("numReceived", 0),
            "numSuccessfullyProcessed": counted.get("numSuccessfullyProcessed", 0),
            "numUserExceptions": counted.get("numUserExceptions", 0),
            "latestUserExceptions": counted.get("latestUserExceptions", []),
            "numSystemExceptions": counted.get("numSystemExceptions", 0),
            "latestSystemExceptions": counted.get("latestSystemExceptions", []),
            "averageLatency": counted.get("averageLatency", 0.0),
            "lastInvocationTime": counted.get("lastInvocationTime", 0),
            "workerId": "c-standalone-fw-magnetar",
        }

    def metrics(self) -> dict[str, Any]:
        return self.counted


async def _lines(stream: asyncio.StreamReader) -> AsyncIterator[tuple[bytes, bool]]:
    """Each line of `stream` (without its end), and whether it is whole: a line longer than
    MAX_LINE comes cut to that length, once, and the rest of it is skipped."""
    pending, skipping = b"", False
    while chunk := await stream.read(_READ_CHUNK):
        *complete, pending = (pending + chunk).split(b"\n")
        for line in complete:
            if not skipping:
                yield line, True
            skipping = False
        if len(pending) > MAX_LINE:
            if not skipping:
                yield pending[:MAX_LINE], False
            pending, skipping = b"", True
    if pending and not skipping:
        yield pending, True


def _outcome_seen(readers: asyncio.Future[Any]) -> None:
    """Mark the readers' end as seen. Cancelled (by a stop, or wait_for's deadline), the gather
    ends with a CancelledError as its exception, which asyncio logs as never retrieved when the
    future is collected: on uvloop, which sees the process exit before its pipe's EOF, about
    every other function deleted logged that traceback."""
    if not readers.cancelled():
        readers.exception()


async def _forward(stream: asyncio.StreamReader, logger: logging.Logger, instance_id: int) -> None:
    """Each line an instance prints (its logging, the user's print()) into the broker's log,
    control characters shown escaped, at most LOG_LINES_PER_SECOND a second after a burst
    of LOG_BURST; the lines left out are counted, in a warning a second at most."""
    tokens, last, dropped, reported = float(LOG_BURST), time.monotonic(), 0, 0.0
    async for line, whole in _lines(stream):
        now = time.monotonic()
        tokens, last = min(LOG_BURST, tokens + (now - last) * LOG_LINES_PER_SECOND), now
        if tokens >= 1:
            tokens -= 1
            text = line.decode(errors="replace").rstrip().translate(_UNPRINTABLE)
            logger.info("[%d] %s%s", instance_id, text, "" if whole else " [line cut]")
        else:
            dropped += 1
        if dropped and now - reported >= 1:
            _report_dropped(logger, instance_id, dropped)
            dropped, reported = 0, now
    if dropped:
        _report_dropped(logger, instance_id, dropped)


def _report_dropped(logger: logging.Logger, instance_id: int, dropped: int) -> None:
    logger.warning("[%d] %d lines of output not logged (over %d a second)", instance_id, dropped,
                   LOG_LINES_PER_SECOND)


class FunctionHome:
    """A function's directory, `<functions dir>/<tenant>/<ns>/<name>`: its code under the
    name the worker chose, and (not sandboxed) each instance's working directory."""

    def __init__(self, root: Path, config: FunctionConfig) -> None:
        self.path = root / config.tenant / config.namespace / config.name
        if not _inside(self.path, root):
            raise ConfigError(f"function {config.fqfn} has no directory of its own under {root}")
        self.code = self.path / "package" / stored_name(config.py or f"{config.name}.py")

    async def write(self, code: bytes) -> None:
        """The directory afresh with `code` in it, off the event loop (a directory an instance
        filled may be large)."""
        await asyncio.to_thread(self._write, code)

    async def remove(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self.path, True)

    def _write(self, code: bytes) -> None:
        """Readable by all whatever the broker's umask: a sandboxed instance reads it as nobody."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.code.parent.mkdir(parents=True)
        self.code.write_bytes(code)
        self.code.parent.chmod(0o755)
        self.code.chmod(0o644)

    async def scratch(self, instance_id: int, isolation: Isolation) -> Path:
        """An instance's working directory when not sandboxed (emptied at each start); in the
        sandbox it is a tmpfs of its own, and this path is not used."""
        path = self.path / f"instance-{instance_id}"
        if isolation.kind == "none":
            await asyncio.to_thread(_recreate, path)
        return path


def _recreate(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


def _inside(path: Path, root: Path) -> bool:
    resolved, base = path.resolve(), root.resolve()
    return resolved != base and base in resolved.parents


class FunctionRuntime:
    """A deployed function's instances, with the files they run from."""

    def __init__(self, deployment: Deployment, home: FunctionHome, launcher: Launcher) -> None:
        self.deployment = deployment
        self.home = home
        self.instances = [InstanceProcess(deployment, i, home, launcher)
                          for i in range(deployment.config.parallelism)]

    def start(self) -> None:
        for instance in self.instances:
            if instance.instance_id not in self.deployment.stopped:
                instance.start()

    async def stop(self) -> None:
        await asyncio.gather(*(instance.stop() for instance in self.instances))

    def status(self) -> dict[str, Any]:
        instances = [{"instanceId": i.instance_id, "status": i.status()} for i in self.instances]
        return {"numInstances": len(instances), "numRunning": sum(i.running for i in self.instances),
                "instances": instances}


async def check_code(launcher: Launcher, config: FunctionConfig, code: bytes, timeout: float) -> None:
    """Load the code, its class and its serdes in a child process started as instances are
    (user code never runs in the broker's): what fails is refused with the loader's message."""
    scratch = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="magnetar-fn-check-"))
    try:
        home = FunctionHome(scratch, config)
        await home.write(code)
        spawn = asyncio.ensure_future(launcher.spawn(home.code, await home.scratch(0, launcher.isolation), config,
                                                     {"check": True}))
        try:
            process = await asyncio.shield(spawn)
        except asyncio.CancelledError:  # the request's budget ran out: let it start, then end it
            await _end(await spawn)
            raise
        try:
            output = await asyncio.wait_for(_tail(process), timeout)
        except TimeoutError:
            raise ConfigError(f"loading {config.className} took over {timeout:.0f} s") from None
        finally:  # timed out, or the request was (its time budget): no check outlives it
            await _end(process)
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)
    if process.returncode != 0:
        lines = [line for line in output.decode(errors="replace").splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if line.startswith("function code error:")),
                      lines[-1] if lines else f"exit code {process.returncode}")
        raise ConfigError(reason.removeprefix("function code error: "))


async def _end(process: asyncio.subprocess.Process) -> None:
    """End a check that may have started a moment ago: its stdin closed (its bootstrap then
    exits), then, a second later, SIGKILL to its process group (not at once: a bubblewrap
    killed while it sets the sandbox up may leave the sandbox running)."""
    if process.returncode is not None:
        return
    assert process.stdin is not None
    process.stdin.close()
    try:
        await asyncio.wait_for(asyncio.shield(process.wait()), END_GRACE_SECONDS)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()


async def _tail(process: asyncio.subprocess.Process) -> bytes:
    """The end of what the process writes, until it exits: CHECK_OUTPUT_BYTES at most kept."""
    assert process.stdout is not None
    kept = b""
    while chunk := await process.stdout.read(_READ_CHUNK):
        kept = (kept + chunk)[-CHECK_OUTPUT_BYTES:]
    await process.wait()
    return kept

