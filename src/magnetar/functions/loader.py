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
        if not hasattr(module, attr):
            raise CodeError(f"module {module_name} has no {attr} (className {name})")
        return getattr(module, attr)
    return _module(name)


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise CodeError(f"no module named {error.name!r} in the function's code (className {name})") from error
    except Exception as error:
        raise _import_failed(name, error) from error


def _import_failed(name: str, error: BaseException) -> CodeError:
    return CodeError(f"importing {name} raised {type(error).__name__}: {error}")


def serde(name: str | None) -> Any:
    """An instance of the serde class `name`: Pulsar's short names (`serde.IdentitySerDe`,
    `serde.PickleSerDe`) and the SDK's, else a class of the user's code."""
    name = name or DEFAULT_SERDE
    short = name.rpartition(".")[2]
    if name in (short, f"serde.{short}", f"pulsar.functions.serde.{short}", f"pulsar.{short}") and \
            hasattr(sdk_serde, short) and short != "SerDe":
        return getattr(sdk_serde, short)()
    kind = find(name)
    if not inspect.isclass(kind):
        raise CodeError(f"serde {name} is not a class")
    instance = kind()
    if not callable(getattr(instance, "serialize", None)) or not callable(getattr(instance, "deserialize", None)):
        raise CodeError(f"serde {name} has no serialize/deserialize methods")
    return instance
