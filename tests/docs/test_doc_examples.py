"""Every shell and Python example of README.md and docs/*.md runs, in order, against a real
standalone, from a shell without an activated venv, and neither fails nor prints a
traceback, a warning or an error. How a page is run, and how a block is kept from running
(`<!-- not-run -->` before its fence), is in doc_runner.py's docstring. Every configuration
block (```properties) loads as a broker.conf, as pasted.

A page whose examples use Spark is marked `spark` (it needs the [spark] extra and Java), so
`-m "not spark"` leaves it out like the other Spark tests; it runs in the full suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_runner import blocks, problems

from magnetar.broker.config import ConfigError
from magnetar.broker.config.loading import load_configuration

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
    shown = problems(output)
    assert not shown, "\n".join(["the examples printed:", *shown[:20], "", output[-8000:]])


def _properties_blocks() -> list[object]:
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in blocks(page.read_text()):
            if block.language == "properties":
                found.append(pytest.param(block.code, id=f"{page.relative_to(ROOT)}:{block.line}"))
    return found


@pytest.mark.parametrize("text", _properties_blocks())
def test_configuration_blocks_load_as_pasted(text: str, tmp_path: Path) -> None:
    """A block a reader pastes into broker.conf: every value parses (no comment after a value:
    a properties file has none, so `true   # ...` is not a boolean) and every key is known."""
    conf = tmp_path / "broker.conf"
    conf.write_text(text)
    try:
        loaded = load_configuration(conf, environ={})
    except ConfigError as exc:
        pytest.fail(str(exc))
    assert not loaded.unknown, loaded.unknown
    assert not [line for line in text.splitlines() if " #" in line.split("=", 1)[-1]], "a comment after a value"


def test_problems_are_the_lines_a_reader_should_not_see() -> None:
    output = "\n".join([
        "| print('Traceback (most recent call last)')",  # an example's own text
        "2026-11-28 02:28:45.101 INFO  [1] ClientConnection:209 | Create ClientConnection",
        "2026-11-28 02:28:45.101 WARN  [1] ConsumerImpl:191 | Destroyed consumer which was not properly closed",
        "26/11/28 02:24:27 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform",
        "[Stage 1:>   (0 + 1) / 1]   26/11/28 02:24:47 WARN DataSourceManager: The data source magnetar replaced",
        "/x/y.py:3: DeprecationWarning: old", "Traceback (most recent call last):",
        "2026-11-28 02:23:47,500 WARNING magnetar.config: unknown key",
    ])
    assert problems(output) == output.splitlines()[2:3] + output.splitlines()[4:]


def test_blocks_are_found_with_their_marks() -> None:
    page = "\n".join([
        "text", "```sh", "echo one", "```", "<!-- not-run: a sketch -->", "```python", "sketch(...)", "```",
        "```text", "output", "```", "```py", "print(2)", "```", "<!-- file: conftest.py -->", "```python",
        "x = 1", "```",
    ])
    found = [(b.language, b.code, b.line, b.run, b.file) for b in blocks(page)]
    assert found == [("sh", "echo one\n", 2, True, None), ("python", "sketch(...)\n", 6, False, None),
                     ("text", "output\n", 9, False, None), ("python", "print(2)\n", 12, True, None),
                     ("python", "x = 1\n", 16, True, "conftest.py")]
