"""CRC-32C, the checksum of Pulsar's frames, stored entries and Kafka's record batches.

The `crc32c` distribution's package `__init__` imports `importlib.metadata` only to read its
own version string: at a broker's start that was ~11 ms and ~3.4 MB of resident memory for
one function. The compiled module the package wraps (`crc32c._crc32c`) is loaded here
without running that `__init__`, under its own name, so a later `import crc32c` reuses it
rather than loading the extension twice. Where the package's layout differs (a future
release), the package is imported as usual.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

EXTENSION = "crc32c._crc32c"


def _extension() -> ModuleType:
    if EXTENSION in sys.modules:
        return sys.modules[EXTENSION]
    package = importlib.util.find_spec("crc32c")
    locations = package.submodule_search_locations if package else None
    spec = importlib.machinery.PathFinder.find_spec("_crc32c", list(locations or ()))
    if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
        return importlib.import_module("crc32c")
    spec = importlib.util.spec_from_file_location(EXTENSION, spec.origin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[EXTENSION] = module
    spec.loader.exec_module(module)
    return module


crc32c: Callable[..., int] = _extension().crc32c
"""`crc32c(data, value=0)`: the CRC-32C of `data`, continuing from `value`."""
