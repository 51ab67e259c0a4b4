"""One headless Chromium for every page test of the console (console_pages.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from console_pages import chromium


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with chromium() as browser:
        yield browser
