"""The suite's own layout: what makes a test file collectable in any order.

tests/ has no __init__.py files, so pytest imports each test module under its basename; two
files of one name in different folders collide when one worker process collects both
(README's `pytest -n 2` decides which files share a worker, so the clash comes and goes).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_modules_have_unique_basenames() -> None:
    places: defaultdict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if path.name != "conftest.py" and ".venv" not in path.parts:
            places[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: where for name, where in places.items() if len(where) > 1}
    assert not clashes, f"rename one of each: {clashes}"


def _imports_conftest(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "conftest":
            return True
        if isinstance(node, ast.Import) and any(alias.name == "conftest" for alias in node.names):
            return True
    return False


def test_no_test_imports_a_conftest_by_name() -> None:
    """`from conftest import ...` takes whichever conftest module a worker imported first."""
    importers = [str(path.relative_to(TESTS)) for path in TESTS.rglob("*.py")
                 if ".venv" not in path.parts and _imports_conftest(path)]
    assert not importers, f"move what they import into a module of its own: {importers}"
