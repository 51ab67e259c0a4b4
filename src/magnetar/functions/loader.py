"""Loading a user's code the way Pulsar's Python runtime does: a .py file, a .zip (Pulsar's
layout `<name>/src`, `<name>/deps/*.whl`, or modules at its root) or a .whl, then the class or
function `className` names, and the serde classes the config names."""

from __future__ import annotations

import importlib
import inspect
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulsar.functions import serde as sdk_serde

DEFAULT_SERDE = "serde.IdentitySerDe"


class CodeError(Exception):
    """The user's code cannot be loaded; the message says what is missing."""


@dataclass
class UserFunction:
    """What process() calls: an SDK-style object (`process(input, context)`) or a plain
    function of the input."""

    call: Callable[[Any, Any], Any]

    @classmethod
    def load(cls, class_name: str) -> UserFunction:
        target = find(class_name)
        if inspect.isclass(target):
            try:
                instance = target()
            except Exception as error:
                raise CodeError(f"{class_name}() raised {type(error).__name__}: {error}") from error
            process = getattr(instance, "process", None)
            if not callable(process):
                raise CodeError(f"{class_name} has no process(input, context) method")
            return cls(process)
        if inspect.ismodule(target):
            function = getattr(target, "process", None)
            if not callable(function):
                raise CodeError(f"module {class_name} has no process(input) function")
            target = function
        if not callable(target):
            raise CodeError(f"{class_name} is neither a class nor a function")
        function = target
        return cls(lambda value, _context: function(value))


def add_code_to_path(code: Path, workdir: Path) -> None:
    """Make the code importable: a .py's directory, a .whl itself (zipimport reads pure
    Python wheels), a .zip extracted into `workdir` with Pulsar's layout or a flat one."""
    if code.suffix == ".py":
        _prepend(code.parent)
        return
    if not zipfile.is_zipfile(code):
        raise CodeError(f"{code.name} is not a zip archive")
    if code.suffix == ".whl":
        _prepend(code)
        return
    with zipfile.ZipFile(code) as archive:
        archive.extractall(workdir)
    base = workdir / code.stem
    for wheel in sorted((base / "deps").glob("*.whl")):
        _prepend(wheel)
    for directory in (workdir, base, base / "src"):
        if directory.is_dir():
            _prepend(directory)


def _prepend(path: Path) -> None:
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    _CODE_ROOTS.append(str(path.resolve()))


_CODE_ROOTS: list[str] = []
"""Where the user's code was put on sys.path: what `find` returns must come from there."""


def _of_the_code(module: Any, name: str) -> Any:
    """`module` when its file is one of the user's code; a module of the same name imported
    before (the runtime's, the standard library's) is refused rather than used."""
    file = str(Path(getattr(module, "__file__", None) or "/").resolve())
    if not any(file == root or file.startswith(root + "/") for root in _CODE_ROOTS):
        raise CodeError(f"{name}: module {module.__name__} is not the function's code ({file})")
    return module


def find(name: str) -> Any:
    """`module.attr` (a class or function), or a module itself."""
    module_name, _, attr = name.rpartition(".")
    if module_name:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            missing = error.name == module_name or module_name.startswith(f"{error.name}.")
            if not missing:
                raise _import_failed(name, error) from error
            return _module(name)
        except Exception as error:
            raise _import_failed(name, error) from error
        _of_the_code(module, name)
        if not hasattr(module, attr):
            raise CodeError(f"module {module_name} has no {attr} (className {name})")
        return getattr(module, attr)
    return _module(name)


def _module(name: str) -> Any:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise CodeError(f"no module named {error.name!r} in the function's code (className {name})") from error
    except Exception as error:
        raise _import_failed(name, error) from error
    return _of_the_code(module, name)


def _import_failed(name: str, error: BaseException) -> CodeError:
    return CodeError(f"importing {name} raised {type(error).__name__}: {error}")


def builtin_serde(name: str) -> type | None:
    """The SDK's serde class `name` names (Pulsar's short names `serde.IdentitySerDe`,
    `IdentitySerDe`, and the SDK's full ones), else None."""
    short = name.rpartition(".")[2]
    if name in (short, f"serde.{short}", f"pulsar.functions.serde.{short}", f"pulsar.{short}") and \
            hasattr(sdk_serde, short) and short != "SerDe":
        return getattr(sdk_serde, short)
    return None


def serde(name: str | None) -> Any:
    """An instance of the serde class `name`: the SDK's, else a class of the user's code."""
    name = name or DEFAULT_SERDE
    builtin = builtin_serde(name)
    if builtin is not None:
        return builtin()
    kind = find(name)
    if not inspect.isclass(kind):
        raise CodeError(f"serde {name} is not a class")
    instance = kind()
    if not callable(getattr(instance, "serialize", None)) or not callable(getattr(instance, "deserialize", None)):
        raise CodeError(f"serde {name} has no serialize/deserialize methods")
    return instance
