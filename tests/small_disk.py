"""A small real file system for full-disk tests, and a file that takes every byte left on it.

A loop-mounted ext4 image is the disk the issue was found on; where loop devices are
missing (some containers), a size-limited tmpfs fills the same way. Both need root (or
CAP_SYS_ADMIN): `MountUnavailable` says why neither could be mounted, and tests skip on it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

_CHUNKS = (1 << 20, 1 << 12)


class MountUnavailable(Exception):
    """Neither a loop-mounted image nor a tmpfs could be mounted here."""


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def _mount_ext4(image: Path, mount_point: Path, size_mb: int) -> None:
    if shutil.which("mkfs.ext4") is None:
        raise FileNotFoundError("mkfs.ext4 is not installed")
    with open(image, "wb") as file:
        file.truncate(size_mb << 20)
    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))  # -m 0: root has no reserved blocks either
    _run("mount", "-o", "loop", str(image), str(mount_point))


@contextlib.contextmanager
def mount_small_disk(parent: Path, size_mb: int = 30) -> Iterator[Path]:
    """A fresh file system of about `size_mb` MB under `parent`, unmounted on exit."""
    mount_point = parent / "disk"
    mount_point.mkdir()
    reasons = []
    try:
        _mount_ext4(parent / "disk.img", mount_point, size_mb)
    except (OSError, subprocess.SubprocessError) as exc:
        reasons.append(f"loop-mounted ext4: {_reason(exc)}")
        try:
            _run("mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount_point))
        except (OSError, subprocess.SubprocessError) as tmpfs_exc:
            reasons.append(f"tmpfs: {_reason(tmpfs_exc)}")
            raise MountUnavailable("; ".join(reasons)) from None
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False, capture_output=True, timeout=30)
        with contextlib.suppress(OSError):
            (parent / "disk.img").unlink()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        return (exc.stderr or b"").decode(errors="replace").strip() or str(exc)
    return str(exc)


def fill(disk: Path) -> Path:
    """Write a file until the file system refuses another byte; delete it to give the space back."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in _CHUNKS:
            block = b"\0" * size
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    break
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
    return filler
