"""Processes read from /proc, for tests and benchmarks: a process's parent, its
descendants, its CPU seconds and resident memory. A process gone meanwhile counts as
nothing (trees change while they are read)."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parent(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it, from one scan of /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            ppid = parent(int(entry))
            if ppid is not None:
                children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, ()))
    return found


def cpu_seconds(*pids: int) -> float:
    """utime + stime of every thread of these processes."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def rss_kb(*pids: int) -> int:
    """VmRSS of these processes, summed."""
    total = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in lines if line.startswith("VmRSS:")), 0)
    return total


def established(pid: int, port: int) -> int:
    """The process's established TCP connections (IPv4 and IPv6) whose local port is `port`."""
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            count += int(local.rsplit(":", 1)[1], 16) == port and state == "01"
    return count


def function_instance(pid: int) -> int | None:
    """The Python process of a function instance below `pid` (a broker), not the bubblewrap
    ones around it when sandboxed; None when there is none."""
    for found in descendants(pid):
        try:
            argv = Path(f"/proc/{found}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"magnetar.functions.bootstrap" in argv and not argv[0].endswith(b"bwrap"):
            return found
    return None
