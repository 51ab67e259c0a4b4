"""The first instructions of a function instance's process, before any code but Python's own
runs: tie its life to the worker's, take what the worker hands over on stdin, confine the
process, then start the instance (magnetar.functions.instance).

`python -m magnetar.functions.bootstrap --code PATH [--parent PID] [--run-as UID:GID]`

Dying with the worker, in every phase (a user's import may take minutes):
- not sandboxed, the kernel kills the process when the worker's thread that started it
  ends (PR_SET_PDEATHSIG), armed first and checked against `--parent`, so a worker gone
  before it was armed is noticed too;
- sandboxed, bubblewrap's --die-with-parent does the same for the sandbox;
- in both, stdin is a pipe from the worker, watched from the start: end of file (the
  worker is gone) ends the process, a `stop` line asks it to stop as SIGTERM does.

Nothing secret is on the command line or in the environment (both readable by other local
processes): the handoff (config with its secrets, the credential) comes on stdin.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import signal
import sys
import threading
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
OOM_SCORE_ADJ = 1000
"""The instance is what the kernel's out-of-memory killer takes first, never the broker."""
NICENESS = 10
"""Below the broker's CPU priority: a busy function cannot starve the event loop."""
MAX_OPEN_FILES = 4096
MAX_PROCESSES = 4096
"""RLIMIT_NPROC of the unprivileged user instances run as (when the broker is root): a fork
bomb stops there. The kernel counts every process and thread of that user, all instances'."""


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.parent is not None:
        _die_with(args.parent)
    line, rest = _read_line(0)
    if line is None:  # the worker went before it handed anything over
        return 0
    handoff = json.loads(line)
    _confine(args.run_as)
    _watch_worker(0, rest)
    if handoff.get("transactions"):  # EFFECTIVELY_ONCE with the broker's transaction coordinator
        from magnetar.functions.txn_instance import run  # noqa: PLC0415  (after the process is confined)
    else:
        from magnetar.functions.instance import run  # noqa: PLC0415

    return run(handoff, Path(args.code))


def _prctl(option: int, value: int) -> None:
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _die_with(parent: int) -> None:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above: nobody will send the signal
        os._exit(0)


def _confine(run_as: tuple[int, int] | None) -> None:
    """Lower the process's standing: first pick of the OOM killer, no core files, fewer
    files and CPU priority, then (as root in the sandbox) the unprivileged user, which also
    drops the two capabilities bubblewrap left for this; no privilege can come back."""
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text(str(OOM_SCORE_ADJ))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _lower(resource.RLIMIT_NOFILE, MAX_OPEN_FILES)
    os.nice(NICENESS)
    if run_as is not None:
        _lower(resource.RLIMIT_NPROC, MAX_PROCESSES)
        uid, gid = run_as
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def _lower(limit: int, most: int) -> None:
    soft, hard = resource.getrlimit(limit)
    hard = most if hard == resource.RLIM_INFINITY else min(hard, most)
    resource.setrlimit(limit, (min(hard, soft) if soft != resource.RLIM_INFINITY else hard, hard))


def _read_line(fd: int, pending: bytes = b"") -> tuple[bytes | None, bytes]:
    """One line from `fd` (unbuffered: a daemon thread blocked in a buffered read would hold
    its lock when the interpreter ends) and what came after it; None at end of file."""
    while b"\n" not in pending:
        chunk = os.read(fd, 65536)
        if not chunk:
            return None, b""
        pending += chunk
    line, _, rest = pending.partition(b"\n")
    return line, rest


def _watch_worker(fd: int, pending: bytes) -> None:
    """A `stop` line asks the instance to stop (SIGTERM's handler); end of file, the worker
    gone, ends the process at once."""
    def watch() -> None:
        rest = pending
        while True:
            line, rest = _read_line(fd, rest)
            if line is None:
                os._exit(0)
            if line.strip() == b"stop":
                os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="worker-watch", daemon=True).start()


def _run_as(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    return int(uid), int(gid)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m magnetar.functions.bootstrap")
    parser.add_argument("--code", required=True, help="the function's .py, .zip or .whl")
    parser.add_argument("--parent", type=int, help="the worker's pid (not sandboxed: die with it)")
    parser.add_argument("--run-as", type=_run_as, help="UID:GID to drop to (the broker runs as root)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
