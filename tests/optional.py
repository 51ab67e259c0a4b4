"""Third-party modules of an extra ([spark], [arrow]) that a test needs.

Where the extra is not installed the test is skipped; on CI (CI=true), which installs every
extra the suite uses, a missing one is an error, so nothing is skipped there in silence.
magnetar's own modules are always imported plainly: an import error of ours is a failure.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def optional_module(name: str) -> ModuleType:
    if os.environ.get("CI"):
        return importlib.import_module(name)
    return pytest.importorskip(name, reason=f"{name} is not installed (the [spark] extra)")
