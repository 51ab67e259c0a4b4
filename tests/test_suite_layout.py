"""The suite's own layout: what makes a test file collectable in any order.

tests/ has no __init__.py files, so pytest imports each test module under its basename; two
files of one name in different folders collide when one worker process collects both
(README's `pytest -n 2` decides which files share a worker, so the clash comes and goes).
"""

from __future__ import annotations

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
