"""The admin client's old paths (docs showed `magnetar.admin.client.AdminClient`) still name
the same classes, and say where they moved."""

from __future__ import annotations

import importlib
import sys

import pytest

from magnetar.admin_client import AdminClient, AdminError, FunctionsAdmin
from magnetar.admin_client.functions import multipart


@pytest.mark.parametrize(("old", "names"), [
    ("magnetar.admin.client", {"AdminClient": AdminClient, "AdminError": AdminError}),
    ("magnetar.admin.functions_client", {"FunctionsAdmin": FunctionsAdmin, "multipart": multipart}),
])
def test_an_old_path_names_the_same_classes_and_warns(old: str, names: dict[str, object]) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=r"import \w+ from magnetar\.admin_client"):
        module = importlib.import_module(old)
    assert {name: getattr(module, name) for name in names} == names
