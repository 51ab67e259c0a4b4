"""Every shell and Python example of README.md and docs/*.md runs, in order, against a real
standalone, and neither fails nor prints a traceback. How a page is run, and how a block is
kept from running (`<!-- not-run -->` before its fence), is in doc_runner.py's docstring.

A page whose examples use Spark is marked `spark` (it needs the [spark] extra and Java), so
`-m "not spark"` leaves it out like the other Spark tests; it runs in the full suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_runner import blocks

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("doc_runner.py")
SPARK_WORDS = ("pyspark", "magnetar.spark", "--spark")


def _pages() -> list[object]:
    pages = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        runnable = [b for b in blocks(page.read_text()) if b.run]
        if not runnable:
            continue
        spark = any(word in b.code for b in runnable for word in SPARK_WORDS)
        marks = [pytest.mark.spark, pytest.mark.timeout(900)] if spark else [pytest.mark.timeout(600)]
        pages.append(pytest.param(page, marks=marks, id=str(page.relative_to(ROOT))))
    return pages


@pytest.mark.parametrize("page", _pages())
def test_examples_run_top_to_bottom(page: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    result = subprocess.run([sys.executable, str(RUNNER), str(page), str(tmp_path)], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=880, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "Traceback (most recent call last)" not in output, output[-8000:]


def test_blocks_are_found_with_their_marks() -> None:
    page = "\n".join([
        "text", "```sh", "echo one", "```", "<!-- not-run: a sketch -->", "```python", "sketch(...)", "```",
        "```text", "output", "```", "```py", "print(2)", "```",
    ])
    found = [(b.language, b.code, b.line, b.run) for b in blocks(page)]
    assert found == [("sh", "echo one\n", 2, True), ("python", "sketch(...)\n", 6, False),
                     ("text", "output\n", 9, False), ("python", "print(2)\n", 12, True)]
