"""Run the examples of one Markdown page, top to bottom, as a reader would: `python
doc_runner.py PAGE WORKDIR`. The exit code is 0 when every example ran, 1 at the first that
failed (its place in the page is printed before it runs). `problems(output)` names the lines
of a run's output that a reader should not see (tracebacks, warnings, errors): the test fails
on those too.

Which blocks run: those fenced as ```sh (bash, shell) or ```python (py). A block after an
HTML comment starting `<!-- not-run` (on the line just before its fence; a reason may follow,
`<!-- not-run: installs a venv -->`) is shown, not run: signatures, sketches, set-up steps.
A block after `<!-- file: NAME -->` is written to the file NAME (a test module, a conftest.py)
for a later block to use, whatever its fence. Other fences (```text, ```properties, ```json, a bare ```) are never run.

How they run: against a fresh `magnetar standalone` with its data in WORKDIR/magnetar-data
(what `./magnetar-data` means to the examples), from WORKDIR, a checkout as README leaves it:
`.venv` there is this interpreter's virtual environment. The shell is one without an
activated venv: PATH holds no venv's bin/, and bare `magnetar`, `python`, `pip` and `pytest`
fail as "command not found" would, so the pages must write `.venv/bin/magnetar` (README's
rule). Shell blocks run with `bash -e -o pipefail`; Python blocks run one after another in
this interpreter (`.venv/bin/python`) with one namespace, like one interactive session, so a
later block uses what an earlier one defined. When the page is done the namespace is dropped
while the broker still runs, so a client an example left open says so (the official client
logs `Destroyed consumer which was not properly closed`). The broker listens on free ports:
the well-known 6650 and 8080 in an example's text are replaced by them, and
MAGNETAR_SERVICE_URL / MAGNETAR_ADMIN_URL point the CLI's defaults at it. A shell block that
is one `magnetar standalone ...` command restarts the broker with those flags (on free ports,
same data), for the blocks after it. A page that names an Apache Pulsar cluster as
`pulsar.example.com` (docs/scaling.md) gets a second standalone standing in for it, its ports
put in place of the cluster's 6650 and 8080.
"""

from __future__ import annotations

import gc
import os
import re
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the standalone helper
from standalone import Standalone

RUN_LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python"}
FENCE = re.compile(r"^```([\w+-]*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not-run\b")
FILE = re.compile(r"^<!--\s*file:\s*(\S+)\s*-->$")
CLUSTER_HOST = "pulsar.example.com"
STANDALONE = re.compile(r"^\s*(?:\S*magnetar|python3? -m magnetar) standalone\b(.*)$", re.DOTALL)
_PORT_FLAGS = {"--port", "--http-port", "--data-dir"}
KAFKA_LISTENER = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
#: Marks the lines of an example's text, printed before it runs.
ECHO = "| "
#: What a venv's bin/ adds to PATH: written bare, a page would need an activated venv.
VENV_COMMANDS = ("magnetar", "python", "pip", "pytest")
#: Lines a reader should not see in an example's output: a traceback; a warning or an error
#: logged by Python's warnings (`file:1: DeprecationWarning: ...`) or logging (magnetar's
#: format), by the official client's C++ core (`2026-01-01 10:00:00.000 WARN  [...]`), or
#: by Spark's JVM (`26/01/01 10:00:00 WARN Class: ...`, `WARNING: ...`).
PROBLEM = re.compile(
    r"Traceback \(most recent call last\)"
    r"|^\S+:\d+: \w*Warning: "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+ +(WARN|WARNING|ERROR|CRITICAL) "
    r"|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|ERROR) "
    r"|^WARNING: ",
    re.MULTILINE)
#: Notes of Spark (on its environment, on its own habits) and of the official client, which every
#: user of them sees and no page can avoid; anything else they warn of fails the page.
NOTES = re.compile(
    r"WARNING: Using incubator modules: jdk\.incubator\.vector"  # Spark 4 on Java 17+
    r"|WARN NativeCodeLoader: Unable to load native-hadoop library"  # no Hadoop native libraries
    # every streaming query, with adaptive execution on (Spark's default)
    r"|WARN ResolveWriteToStream: spark\.sql\.adaptive\.enabled is not supported in streaming"
    r"|WARN DAGScheduler: Failed to cancel job group .* Cannot find active jobs"  # a stopped query
    r"|WARN .*TableViewImpl:\d+ \| Reader .* was interrupted: AlreadyClosed"  # any TableView's close()
    # another Spark application on the machine (a parallel test's) holds the UI's port 4040
    r"|WARN Utils: Service 'SparkUI' could not bind on port \d+\. Attempting port \d+\."
)


@dataclass(frozen=True)
class Block:
    language: str  # "sh", "python", or the fence's own word for blocks that never run
    code: str
    line: int  # of the opening fence, 1-based
    run: bool
    file: str | None = None  # written to this file (`<!-- file: NAME -->`), not run


def problems(output: str) -> list[str]:
    """The lines of a run's output that show something went wrong (see PROBLEM), but the NOTES
    and the examples' own text, echoed before each runs."""
    return [line for line in output.splitlines()
            if not line.startswith(ECHO) and PROBLEM.search(line) and not NOTES.search(line)]


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown page, in order."""
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            index += 1
            continue
        start = index
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("```")), len(lines))
        word = match.group(1).lower()
        language = RUN_LANGUAGES.get(word, word)
        before = lines[start - 1].strip() if start > 0 else ""
        marked = NOT_RUN.match(before) is not None
        file = FILE.match(before)
        code = "\n".join(lines[start + 1:end]) + "\n"
        runs = file is not None or (language in ("sh", "python") and not marked)
        found.append(Block(language, code, start + 1, run=runs, file=file.group(1) if file else None))
        index = end + 1
    return found


class Page:
    """One page's run: its broker, its working directory, its Python namespace."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page = page
        self.workdir = workdir
        self.namespace: dict[str, object] = {"__name__": "__main__"}
        self.broker = self._start([])
        self.cluster = (Standalone(workdir / "cluster-data").start()
                        if CLUSTER_HOST in page.read_text() else None)

    def _start(self, args: list[str]) -> Standalone:
        broker = Standalone(self.workdir / "magnetar-data", args=args).start()
        os.environ["MAGNETAR_SERVICE_URL"] = broker.url
        os.environ["MAGNETAR_ADMIN_URL"] = broker.admin_url
        return broker

    def local(self, code: str) -> str:
        """The example as it must read to reach this page's broker."""
        pulsar_port = self.broker.url.rsplit(":", 1)[1]
        admin_port = self.broker.admin_url.rsplit(":", 1)[1]
        kafka = KAFKA_LISTENER.findall(self.broker.log())
        for host in ("127.0.0.1", "localhost"):
            code = code.replace(f"{host}:6650", f"127.0.0.1:{pulsar_port}")
            code = code.replace(f"{host}:8080", f"127.0.0.1:{admin_port}")
            if kafka:
                code = code.replace(f"{host}:9092", f"127.0.0.1:{kafka[-1]}")
        if self.cluster is not None:
            code = code.replace(f"pulsar://{CLUSTER_HOST}:6650", self.cluster.url)
            code = code.replace(f"http://{CLUSTER_HOST}:8080", self.cluster.admin_url)
        return code

    def run(self, block: Block) -> None:
        shown = "".join(f"{ECHO}{line}\n" for line in block.code.splitlines())
        print(f"----- {self.page.name}:{block.line} ({block.language})\n{shown}", flush=True)
        code = self.local(block.code)
        if block.file is not None:
            (self.workdir / block.file).write_text(code)
            return
        standalone = STANDALONE.match(code.strip()) if block.language == "sh" else None
        if standalone is not None and "\n" not in code.strip():
            self.restart(shlex.split(standalone.group(1)))
        elif block.language == "sh":
            self.shell(code)
        else:
            self.python(code, f"{self.page.name}:{block.line}")

    def restart(self, args: list[str]) -> None:
        """The page starts a standalone with flags of its own: this one, on free ports, same data."""
        kept: list[str] = []
        remaining = iter(args)
        for arg in remaining:
            if arg in _PORT_FLAGS:
                next(remaining, None)  # its value: ports and the data dir are the runner's
            elif arg == "--kafka":
                kept += ["--kafka", "0"]  # Kafka's port too; local() puts it in place of 9092
            elif arg.isdigit() and kept[-2:] == ["--kafka", "0"]:
                continue  # the port the page gave --kafka
            elif arg.split("=", 1)[0] not in _PORT_FLAGS:
                kept.append(arg)
        self.broker.stop()
        self.broker = self._start(kept)

    def shell(self, code: str) -> None:
        result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code], cwd=self.workdir, text=True,
                                capture_output=True, timeout=600, check=False)
        sys.stdout.write(result.stdout + result.stderr)
        if result.returncode != 0:
            raise SystemExit(f"exit code {result.returncode}")

    def python(self, code: str, where: str) -> None:
        os.chdir(self.workdir)
        exec(compile(code, where, "exec"), self.namespace)  # the page's own example, in its session
        sys.stdout.flush()

    def end_session(self) -> None:
        """Drop what the examples defined while the broker still runs: a client they left open
        is destroyed now and says so (the official client logs a warning per open consumer)."""
        self.namespace.clear()
        gc.collect()
        sys.stdout.flush()

    def close(self) -> None:
        self.broker.stop()
        if self.cluster is not None:
            self.cluster.stop()


def fresh_shell(workdir: Path) -> None:
    """The environment of a shell in a checkout whose venv is not activated: `.venv` is this
    interpreter's, no venv's bin/ is on PATH, and bare venv commands are not found. Spark
    binds to loopback, as everything of the suite does."""
    venv = workdir / ".venv"
    if not venv.exists():
        venv.symlink_to(sys.prefix)
    venv_bins = {str((Path(sys.prefix) / "bin").resolve()), str((venv / "bin").resolve())}
    path = [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
            if entry and str(Path(entry).resolve()) not in venv_bins]
    shims = workdir / ".not-on-path"
    shims.mkdir(exist_ok=True)
    for command in VENV_COMMANDS:
        shim = shims / command
        shim.write_text(f"#!/bin/sh\necho '{command}: command not found (a fresh shell: write .venv/bin/{command}, "
                        f"README's rule)' >&2\nexit 127\n")
        shim.chmod(0o755)
    os.environ["PATH"] = os.pathsep.join([str(shims), *path])
    for name in [name for name in os.environ if name == "VIRTUAL_ENV" or name.startswith("PYTEST_")]:
        del os.environ[name]
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


def main(page_path: str, workdir_path: str) -> int:
    page, workdir = Path(page_path).resolve(), Path(workdir_path).resolve()
    fresh_shell(workdir)
    started = time.monotonic()
    run = Page(page, workdir)
    try:
        for block in blocks(page.read_text()):
            if block.run:
                run.run(block)
        run.end_session()
    except SystemExit as failure:
        print(f"FAILED: {failure}", flush=True)
        return 1
    except BaseException:  # the example's own exception: the page is wrong
        traceback.print_exc()
        return 1
    finally:
        run.close()
    print(f"----- {page.name}: every example ran in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
