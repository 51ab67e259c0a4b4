"""The layers of the package hold (docs/architecture.md).

README's `pytest` is what CI runs, so the import-linter contracts in pyproject.toml are checked
here, and so is what a contract cannot say: import cycles stay small and inside one package.
Imports under `if TYPE_CHECKING:` count in both: an annotation naming a class is a dependency.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import grimp
import pytest

import magnetar

ROOT = Path(__file__).resolve().parents[1]
LARGEST_CYCLE = 12
"""Modules in the largest import cycle allowed (issue 31)."""
TOP_LEVEL = sorted(module.name for module in pkgutil.iter_modules(magnetar.__path__))

def test_import_contracts_hold() -> None:
    """`lint-imports` exits non-zero on any broken contract; its report says which import broke it."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(lint_imports), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_layers_picture_is_up_to_date() -> None:
    """docs/architecture.md draws the layers and imports the code has, not those it had."""
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "architecture_diagram.py"), "--check"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def strongly_connected(graph: grimp.ImportGraph) -> Iterator[set[str]]:
    """Tarjan's components of the import graph, iteratively (the graph is deep enough to hit
    Python's recursion limit in places)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in sorted(graph.modules):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, successors = work[-1]
            successor = next(successors, None)
            if successor is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = set()
                    while (member := stack.pop()) != module:
                        on_stack.discard(member)
                        component.add(member)
                    on_stack.discard(module)
                    component.add(module)
                    yield component
            elif successor not in index:
                index[successor] = low[successor] = len(index)
                stack.append(successor)
                on_stack.add(successor)
                work.append((successor, iter(sorted(graph.find_modules_directly_imported_by(successor)))))
            elif successor in on_stack:
                low[module] = min(low[module], index[successor])


def one_concept(modules: Iterable[str]) -> bool:
    """True when every module is one package or a direct child of it (`a.b` and `a.b.c`, or
    `a.b.c` and `a.b.d`): a cycle a reader follows without leaving one folder."""
    modules = set(modules)
    candidates = {module.rpartition(".")[0] for module in modules} | modules
    return any(all(module == package or module.rpartition(".")[0] == package for module in modules)
               for package in candidates)


@pytest.fixture(scope="module")
def cycles() -> list[set[str]]:
    graph = grimp.build_graph("magnetar", include_external_packages=False, exclude_type_checking_imports=False,
                              cache_dir=None)
    return [component for component in strongly_connected(graph) if len(component) > 1]


@pytest.mark.parametrize("package", TOP_LEVEL)
def test_import_cycles_are_small_and_inside_one_package(cycles: list[set[str]], package: str) -> None:
    prefix = f"magnetar.{package}"
    mine = [sorted(cycle) for cycle in cycles
            if any(module == prefix or module.startswith(prefix + ".") for module in cycle)]
    too_big = [cycle for cycle in mine if len(cycle) > LARGEST_CYCLE]
    assert not too_big, f"import cycles of more than {LARGEST_CYCLE} modules: {too_big}"
    spread = [cycle for cycle in mine if not one_concept(cycle)]
    assert not spread, f"import cycles across packages (break them with a Protocol or by moving code down): {spread}"


def test_the_cycle_finder_finds_cycles_and_only_them() -> None:
    """The finder itself, on a graph whose components are known."""
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "q.e"),
                               ("q.e", "q.f"), ("q.f", "q.e")]:
        graph.add_import(importer=importer, imported=imported)
    assert sorted(sorted(c) for c in strongly_connected(graph) if len(c) > 1) == [["p.a", "p.b", "p.c"],
                                                                                  ["q.e", "q.f"]]
    assert one_concept({"p.a", "p.b"}) and one_concept({"p", "p.a"}) and one_concept({"p.x", "p.x.y", "p.x.z"})
    assert not one_concept({"p.a", "q.b"}) and not one_concept({"p.a", "p.x.y"})
    assert not one_concept({"p.x", "p.x.y", "p.z"})
