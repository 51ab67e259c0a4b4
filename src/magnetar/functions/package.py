"""What a function's uploaded code defines, read without running it: the name the worker
stores it under, and whether `className` (and each serde class the config names) is a class
or function of that code rather than anything importable (`os.system`).

The modules are listed from the file itself (a .py; a .whl's entries; a .zip in Pulsar's
layout, `<name>/src/...` with wheels in `<name>/deps/`, or modules at its root) and the
named module's source is parsed with `ast`: nothing is imported. The instance's process does
this before it imports the code, at the worker's check at create time as at every start.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.util import decode_source
from pathlib import Path, PurePosixPath

_SAFE_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.=+-]{0,127}\.(py|zip|whl)\Z")
_PROTECTED = frozenset({"pulsar", "_pulsar", "magnetar"})
"""Top-level packages the instance itself runs on: a module of the user's by one of these
names would be the runtime's, not the user's."""
_MAX_IMPORT_HOPS = 8


class PackageError(Exception):
    """The code does not define what the config names; the message says which name."""


def stored_name(display: str) -> str:
    """The file name the worker stores the code under: the uploaded file's name when it is a
    plain one (a .py's name is its module's; a .zip's names the directory of Pulsar's
    layout), else `function` with its suffix. Never a path."""
    if _SAFE_FILE_NAME.match(display) and ".." not in display:
        return display
    return "function" + PurePosixPath(display).suffix


def check_names(code: Path, class_name: str, serdes: Iterable[str]) -> None:
    """PackageError unless `class_name` names a class or function (or a module with a
    `process` function) defined in `code`, and each of `serdes` a class defined there."""
    with contextlib.ExitStack() as archives:
        modules = _modules(code, archives)
        _check(modules, class_name, callable_ok=True)
        for serde in serdes:
            _check(modules, serde, callable_ok=False)


@dataclass(frozen=True)
class _Module:
    read: Callable[[], bytes]
    package: bool
    """An `__init__.py`: its relative imports start from itself."""


def _modules(code: Path, archives: contextlib.ExitStack) -> dict[str, _Module]:
    """The importable modules of the code, by dotted name (archives stay open in `archives`)."""
    if code.suffix == ".py":
        return {code.stem: _Module(code.read_bytes, package=False)}
    if not zipfile.is_zipfile(code):
        raise PackageError(f"{code.name} is not a zip archive")
    archive = archives.enter_context(zipfile.ZipFile(code))
    if code.suffix == ".whl":
        return _archive_modules(archive, [""])
    base = code.stem
    modules: dict[str, _Module] = {}
    for entry in archive.namelist():
        if entry.startswith(f"{base}/deps/") and entry.endswith(".whl") and entry.count("/") == 2:
            wheel = archives.enter_context(zipfile.ZipFile(io.BytesIO(archive.read(entry))))
            modules.update(_archive_modules(wheel, [""]))
    modules.update(_archive_modules(archive, [f"{base}/src/", f"{base}/", ""]))  # the loader's order of search
    return modules


def _archive_modules(archive: zipfile.ZipFile, roots: list[str]) -> dict[str, _Module]:
    """The modules under each root, the first root naming a module winning (as sys.path does)."""
    modules: dict[str, _Module] = {}
    for root in roots:
        for entry in archive.namelist():
            if not entry.startswith(root) or not entry.endswith(".py"):
                continue
            parts = entry[len(root):-3].split("/")
            package = parts[-1] == "__init__"
            if package:
                parts.pop()
            if parts and all(part.isidentifier() for part in parts):
                modules.setdefault(".".join(parts), _Module(lambda entry=entry: archive.read(entry), package))
    return modules


def _check(modules: dict[str, _Module], name: str, *, callable_ok: bool) -> None:
    what = "className" if callable_ok else "serde"
    top = name.split(".", 1)[0]
    if top in _PROTECTED or top in sys.stdlib_module_names:
        raise PackageError(f"{what} {name}: {top} is a module of Python or of the function runtime, "
                           "not of the uploaded code")
    module, _, attribute = name.rpartition(".")
    if module in modules:
        kind = _defined(modules, module, attribute, _MAX_IMPORT_HOPS)
        if kind == "class" or (kind == "function" and callable_ok):
            return
        if kind == "function":
            raise PackageError(f"{what} {name} is a function; a serde must be a class")
    if callable_ok and name in modules and _defined(modules, name, "process", _MAX_IMPORT_HOPS) == "function":
        return
    raise PackageError(f"{what} {name} names no {'class or function' if callable_ok else 'class'} defined in the "
                       f"uploaded code (its modules: {', '.join(sorted(modules)[:20]) or 'none'})")


def _defined(modules: dict[str, _Module], module: str, attribute: str, hops: int) -> str | None:
    """`class` or `function` when `module` binds `attribute` at its top level by a `class`
    or `def` statement (or imports it from a module of the code that does), else None."""
    for node in _top_level(_parse(modules, module)):
        if isinstance(node, ast.ClassDef) and node.name == attribute:
            return "class"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attribute:
            return "function"
        if isinstance(node, ast.ImportFrom) and hops > 0:
            for alias in node.names:
                if (alias.asname or alias.name) == attribute:
                    origin = _resolve(module, node, modules)
                    if origin is not None:
                        return _defined(modules, origin, alias.name, hops - 1)
    return None


def _top_level(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """The statements run at import: the module's, and those inside its top-level `if`,
    `try` and `with` blocks."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.With):
            yield from _top_level([*node.body, *getattr(node, "orelse", [])])
        elif isinstance(node, ast.Try):
            yield from _top_level([*node.body, *node.orelse, *node.finalbody,
                                   *(stmt for handler in node.handlers for stmt in handler.body)])


def _resolve(module: str, node: ast.ImportFrom, modules: dict[str, _Module]) -> str | None:
    """The module of the code a `from ... import` reads from (relative ones included)."""
    origin = node.module or ""
    if node.level:
        package = module.split(".") if modules[module].package else module.split(".")[:-1]
        if node.level - 1 > len(package):
            return None
        base = package[:len(package) - (node.level - 1)]
        origin = ".".join([*base, *([node.module] if node.module else [])])
    return origin if origin in modules else None


def _parse(modules: dict[str, _Module], module: str) -> list[ast.stmt]:
    try:
        return ast.parse(decode_source(modules[module].read())).body
    except (SyntaxError, ValueError, UnicodeDecodeError) as error:
        raise PackageError(f"module {module} cannot be parsed: {error}") from None
