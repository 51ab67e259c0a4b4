"""How an instance's process starts: in a bubblewrap sandbox (Debian's `bubblewrap`), or as
a plain child of the broker, as `functionInstanceIsolation` says.

In the sandbox an instance sees the system's programs and libraries (/usr), the Python
installation with the packages it runs on (magnetar, the official client), the few files
of /etc that name services and TLS need, its own code read-only at /function, and a
private, size-limited /tmp that is its working directory. It has its own process, IPC and
hostname namespaces (no other process is visible, none can be signalled), no capabilities,
and, when the broker runs as root, runs as `functionInstanceUser` (nobody). It shares the
network, to reach the broker on loopback. The data directory, the broker's configuration
and secrets, other functions' files and the broker's environment are not there.

`auto` (the default) uses the sandbox where it works and says loudly when it cannot;
`bubblewrap` refuses to run functions without it; `none` runs instances as the broker's OS
user with its view of the files (Pulsar's process runtime), with only a clean environment.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import pwd
import shutil
import signal
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("magnetar.functions")
BOOTSTRAP = "magnetar.functions.bootstrap"
CODE_DIR = "/function"
SCRATCH = "/tmp"
SHM_BYTES = 16 * 1024 * 1024
PROBE_TIMEOUT = 10.0
_ETC = ("ssl", "ca-certificates", "pki", "crypto-policies", "alternatives", "hosts", "nsswitch.conf", "host.conf",
        "gai.conf", "resolv.conf", "localtime", "passwd", "group", "ld.so.cache", "ld.so.conf", "ld.so.conf.d")
"""What of /etc an instance sees: name resolution, TLS trust, time zone, the dynamic linker's
cache, user names (no passwords: those are in shadow)."""
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class IsolationUnavailable(RuntimeError):
    """`functionInstanceIsolation=bubblewrap` on a machine where the sandbox does not work."""


@dataclass(frozen=True)
class Launch:
    """One process to start: its command, environment and working directory, and where the
    code is as the process sees it."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    code: str


@dataclass(frozen=True)
class Isolation:
    kind: str
    """`bubblewrap` or `none`."""
    bwrap: str = ""
    run_as: tuple[int, int] | None = None
    """The uid and gid instances drop to (the broker runs as root), else None."""
    options: tuple[str, ...] = ()
    """bubblewrap's options up to the instance's own files (`sandbox_options`)."""
    python_path: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        if self.kind == "none":
            return ("NOT isolated: instances run as the broker's OS user and can read whatever it can, the data "
                    "directory included; only their environment is clean")
        user = f"as uid {self.run_as[0]}" if self.run_as else "as the broker's user in a user namespace"
        return (f"isolated by bubblewrap ({self.bwrap}): own mount, pid, ipc and uts namespaces, no capabilities, "
                f"{user}; they see the Python installation, their code and a private /tmp")

    def launch(self, code: Path, scratch: Path, scratch_bytes: int) -> Launch:
        """The command starting an instance's bootstrap on `code`, with `scratch` as the
        working directory when not sandboxed, a tmpfs of `scratch_bytes` when sandboxed."""
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
               "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
               **({"PYTHONPATH": os.pathsep.join(self.python_path)} if self.python_path else {})}
        python = [sys.executable, "-m", BOOTSTRAP]
        if self.kind == "none":
            return Launch([*python, "--code", str(code), "--parent", str(os.getpid())],
                          {**env, "HOME": str(scratch)}, scratch, str(code))
        inside = f"{CODE_DIR}/{code.name}"
        argv = [self.bwrap, *_scratch(scratch_bytes), *self.options, "--ro-bind", str(code.parent), CODE_DIR,
                "--chdir", SCRATCH, "--", *python, "--code", inside,
                *(["--run-as", f"{self.run_as[0]}:{self.run_as[1]}"] if self.run_as else [])]
        return Launch(argv, {**env, "HOME": SCRATCH}, Path("/"), inside)


def _scratch(size: int) -> list[str]:
    """The private /tmp, mounted before everything else: bubblewrap mounts in the order given,
    so a Python installation or checkout under /tmp (a CI clone, a venv made there) is bound
    on top of it rather than hidden by it."""
    return ["--perms", "1777", "--size", str(size), "--tmpfs", SCRATCH]


def sandbox_options(run_as: tuple[int, int] | None, hidden: list[str]) -> tuple[str, ...]:
    """bubblewrap's options, up to the instance's own files: namespaces, capabilities, the
    read-only view of the system and of Python, `hidden` paths covered by empty ones."""
    options = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
               "--unshare-cgroup-try", "--hostname", "magnetar-function"]
    if os.geteuid() == 0:  # no user namespace: the bootstrap itself drops to run_as, then holds nothing
        options += ["--cap-drop", "ALL", *(["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"] if run_as else [])]
    else:
        options += ["--unshare-user", "--disable-userns"]
    options += ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LEVEL:
        path = Path("/", name)
        if path.is_symlink():
            options += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            options += ["--ro-bind", str(path), str(path)]
    made: set[str] = {"/", "/usr", SCRATCH}
    for source in [*(f"/etc/{name}" for name in _ETC), *python_roots()]:
        if os.path.lexists(source):
            options += [*_parents(source, made), "--ro-bind", source, source]
    for path in hidden:
        options += ["--tmpfs", path]
    return (*options, "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(SHM_BYTES),
            "--tmpfs", "/dev/shm")


def _parents(path: str, made: set[str]) -> list[str]:
    """`--dir`s for the directories above `path` that the sandbox does not have yet, readable
    by all (bubblewrap makes them 0700, which an instance that dropped to nobody cannot cross)."""
    options: list[str] = []
    for parent in reversed(Path(path).parents):
        if str(parent) not in made:
            made.add(str(parent))
            options += ["--perms", "0755", "--dir", str(parent)]
    return options


def python_roots() -> list[str]:
    """The directories the instance's Python needs: the installation (a venv and the Python it
    was made from), its site-packages, and where magnetar and the client are imported from;
    none inside another, none under /usr (bound whole)."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages(),
                  *_package_roots()}
    resolved = sorted({str(Path(path)) for path in candidates if path and os.path.isdir(path)})
    return [path for path in resolved if path != "/usr" and not path.startswith("/usr/")
            and not any(path.startswith(other + "/") for other in resolved)]


def _package_roots() -> list[str]:
    """Where magnetar and the official client are imported from (found, not imported: the
    client's library has no business in the broker's process)."""
    roots = []
    for name in ("magnetar", "pulsar"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            roots.append(str(Path(spec.origin).resolve().parents[1]))
    return roots


def python_path() -> tuple[str, ...]:
    """The directories magnetar and the client are imported from that are not site-packages
    (a source checkout on PYTHONPATH): the instance's PYTHONPATH."""
    packages = {str(Path(path).resolve()) for path in site.getsitepackages()}
    return tuple(dict.fromkeys(root for root in _package_roots() if root not in packages))


async def choose(setting: str, user: str, data_dir: Path) -> Isolation:
    """The isolation in force for `functionInstanceIsolation=setting`, tried once here; the
    worker logs what it is. IsolationUnavailable when `bubblewrap` was asked for and fails."""
    paths = python_path()
    if setting == "none":
        return Isolation("none", python_path=paths)
    bwrap = shutil.which("bwrap") or ""
    run_as = _run_as(user) if os.geteuid() == 0 else None
    data = data_dir.resolve()
    hidden = [str(data)] if any(_inside(data, Path(root)) for root in python_roots()) else []
    isolation = Isolation("bubblewrap", bwrap, run_as, sandbox_options(run_as, hidden), paths)
    problem = "bwrap (Debian's bubblewrap) is not installed" if not bwrap else await _probe(isolation)
    if problem is None:
        return isolation
    if setting == "bubblewrap":
        raise IsolationUnavailable(f"functionInstanceIsolation=bubblewrap, but {problem}")
    log.error("functions: the bubblewrap sandbox cannot be used here (%s); function instances will run WITHOUT "
              "isolation. Install bubblewrap (and allow user namespaces when the broker is not root), or set "
              "functionInstanceIsolation=none to accept this", problem)
    return Isolation("none", python_path=paths)


def sweep(functions_dir: Path) -> list[int]:
    """Kill what an earlier broker of this data directory left running (SIGKILLed while a
    sandbox was being set up, before bubblewrap's child had armed its parent-death signal,
    that sandbox may outlive it) and return their pids: every process whose command line
    names a file under `functions_dir`. None is this broker's yet (it runs no instance
    before this), and no other broker uses the data directory (its lock)."""
    marker = os.fsencode(f"{functions_dir.resolve()}/")
    killed = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                if not any(arg.startswith(marker) for arg in cmdline.read().split(b"\0")):
                    continue
            os.kill(int(entry.name), signal.SIGKILL)
        except OSError:  # gone meanwhile, or not ours to read
            continue
        killed.append(int(entry.name))
    return killed


def _run_as(user: str) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise IsolationUnavailable(f"functionInstanceUser={user}: no such user") from None
    if entry.pw_uid == 0:
        raise IsolationUnavailable(f"functionInstanceUser={user} is root")
    return entry.pw_uid, entry.pw_gid


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


async def _probe(isolation: Isolation) -> str | None:
    """None when a sandboxed Python starts (and drops to run_as), else what went wrong."""
    drop = "import os; os.setgroups([]); os.setresgid({1}, {1}, {1}); os.setresuid({0}, {0}, {0})".format(
        *isolation.run_as) if isolation.run_as else "pass"
    argv = [isolation.bwrap, *_scratch(1 << 20), *isolation.options, "--chdir", SCRATCH, "--", sys.executable,
            "-c", drop]
    try:
        process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                       stdout=asyncio.subprocess.PIPE,
                                                       stderr=asyncio.subprocess.STDOUT, env={"PATH": "/usr/bin:/bin"})
    except OSError as error:
        return f"bwrap did not run: {error}"
    try:
        output, _ = await asyncio.wait_for(process.communicate(), PROBE_TIMEOUT)
    except TimeoutError:
        return f"a sandboxed Python did not start within {PROBE_TIMEOUT:.0f} s"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    if process.returncode != 0:
        return f"bwrap exited with {process.returncode}: {output.decode(errors='replace').strip()[-500:]}"
    return None
