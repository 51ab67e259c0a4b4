"""Instances as child processes (Pulsar's process runtime): started with the instance
runtime's main, their output read into the broker's log, restarted with backoff when they
die, stopped with SIGTERM then SIGKILL. The check of a function's code at create and
update runs the same main, from the same files, with `--check`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.functions import stats
from magnetar.functions.config import AUTH_PARAMS_VARIABLE, AUTH_PLUGIN_VARIABLE, ConfigError, FunctionConfig
from magnetar.functions.store import Deployment

log = logging.getLogger("magnetar.functions")
STOP_GRACE_SECONDS = 5.0
BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0
STABLE_SECONDS = 60.0
# (client.backoff.Backoff does the same doubling, but importing it loads the whole magnetar.client
# package into the broker at start-up, which tests/broker/test_startup_imports.py refuses)
"""An instance that ran this long before dying restarts after the first backoff again."""


@dataclass(frozen=True)
class Endpoints:
    """Where instances reach the broker and the worker's state API, and the credentials they
    present there (brokerClientAuthenticationPlugin/Parameters; in the environment of the
    instance, not on its command line, which any local user can read)."""

    service_url: str
    admin_url: str
    auth_plugin: str = ""
    auth_params: str = ""

    def environment(self) -> dict[str, str]:
        return {**os.environ, AUTH_PLUGIN_VARIABLE: self.auth_plugin, AUTH_PARAMS_VARIABLE: self.auth_params}


class InstanceProcess:
    """One instance: its process while it runs, its restart count, its stats file."""

    def __init__(self, deployment: Deployment, instance_id: int, home: Path, code: Path,
                 endpoints: Endpoints) -> None:
        self.deployment = deployment
        self.instance_id = instance_id
        self.code = code
        self.endpoints = endpoints
        self.stats_file = home / f"stats-{instance_id}.json"
        self.workdir = home / f"work-{instance_id}"
        self.config_file = home / "config.json"
        self.process: asyncio.subprocess.Process | None = None
        self.restarts = 0
        self.last_exit: str = ""
        self._task: asyncio.Task[None] | None = None
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
            code = await self._run_once()
            if self._stopping:
                return
            self.restarts += 1
            self.last_exit = f"instance exited with code {code}"
            backoff = BACKOFF_FIRST if time.monotonic() - started > STABLE_SECONDS else backoff
            log.warning("function %s %s; restarting in %.0f s", self.label, self.last_exit, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _run_once(self) -> int:
        config = self.deployment.config
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = await _start_instance_main(
            self.config_file, self.code, self.workdir, "--instance-id", str(self.instance_id),
            "--function-id", self.deployment.function_id, "--function-version", str(self.deployment.version),
            "--service-url", self.endpoints.service_url, "--state-url", self.endpoints.admin_url,
            "--stats-file", str(self.stats_file), env=self.endpoints.environment())
        log.info("function %s started (pid %d, %s)", self.label, self.process.pid, config.processingGuarantees)
        assert self.process.stdout is not None
        await _forward(self.process.stdout, logging.getLogger(f"magnetar.functions.{config.fqfn}"), self.instance_id)
        return await self.process.wait()

    async def stop(self) -> None:
        self._stopping = True
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
            log.info("function %s stopped (exit code %d)", self.label, process.returncode)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def status(self) -> dict[str, Any]:
        """pulsar-admin's per-instance status, from the stats file the instance writes."""
        counted = stats.read(self.stats_file)
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
        return stats.read(self.stats_file)


async def _forward(stream: asyncio.StreamReader, logger: logging.Logger, instance_id: int) -> None:
    """Each line an instance prints (its logging, the user's print()) into the broker's log."""
    while line := await stream.readline():
        logger.info("[%d] %s", instance_id, line.decode(errors="replace").rstrip())


class FunctionRuntime:
    """A deployed function's instances, with the files they run from."""

    def __init__(self, deployment: Deployment, code: bytes, home: Path, endpoints: Endpoints) -> None:
        self.deployment = deployment
        self.home = home
        config = deployment.config
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        code_path, _ = _write_files(home, config, code)
        self.instances = [InstanceProcess(deployment, i, home, code_path, endpoints)
                          for i in range(config.parallelism)]

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


def _write_files(home: Path, config: FunctionConfig, code: bytes) -> tuple[Path, Path]:
    """The code and the config.json the instance runtime's main reads, written into `home`."""
    code_path, config_path = home / (config.py or "function.py"), home / "config.json"
    code_path.write_bytes(code)
    config_path.write_text(json.dumps(config.to_json()))
    return code_path, config_path


async def _start_instance_main(config: Path, code: Path, workdir: Path, *options: str,
                               env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    """The instance runtime's main in a session of its own (a signal to the broker's process
    group does not reach it), its output on one pipe."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "magnetar.functions.instance", "--config", str(config), "--code", str(code),
        "--workdir", str(workdir), *options,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True, env=env)


async def check_code(config: FunctionConfig, code: bytes, timeout: float) -> None:
    """Load the code, its class and its serdes in a child process (user code never runs in
    the broker's): what fails here is refused at create time with the loader's message."""
    with tempfile.TemporaryDirectory(prefix="magnetar-fn-check-") as scratch:
        home = Path(scratch)
        code_path, config_path = _write_files(home, config, code)
        process = await _start_instance_main(config_path, code_path, home / "work", "--check")
        try:
            output, _ = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            raise ConfigError(f"loading {config.className} took over {timeout:.0f} s") from None
        finally:  # timed out, or the request was (its time budget): no check outlives it
            if process.returncode is None:
                process.kill()
                await process.wait()
    if process.returncode != 0:
        lines = [line for line in output.decode(errors="replace").splitlines() if line.strip()]
        reason = next((line for line in reversed(lines) if line.startswith("function code error:")),
                      lines[-1] if lines else f"exit code {process.returncode}")
        raise ConfigError(reason.removeprefix("function code error: "))
