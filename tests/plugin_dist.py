"""Installing a plugin the way pip installs one: a `*.dist-info` directory with an
`entry_points.txt`, in a directory the broker finds on its PYTHONPATH. Entry points are
what an operator installs; names in policies may resolve only to those."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def install_entry_points(directory: Path, distribution: str, group: str, plugins: Mapping[str, str]) -> Path:
    """Register `plugins` (name -> `package.module:Class`) under `group` in `directory`,
    as an installed distribution named `distribution`; returns `directory`."""
    info = directory / f"{distribution}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    lines = [f"[{group}]", *(f"{name} = {target}" for name, target in plugins.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return directory
