"""A headless Chromium for the console's page tests: Debian's `chromium` package driven by
Playwright, never a browser Playwright downloads. A machine without it fails the tests with
what to install (.ci/run installs it), rather than skipping them."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest
from standalone import Standalone

CHROMIUM = os.environ.get("MAGNETAR_CHROMIUM", "/usr/bin/chromium")


@contextlib.contextmanager
def chromium() -> Iterator:
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"the console's page tests need Chromium at {CHROMIUM}: `apt-get install chromium` "
                    "(.ci/run installs it), or set MAGNETAR_CHROMIUM to another Chromium")
    from playwright.sync_api import sync_playwright  # noqa: PLC0415  (only these tests drive a browser)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            browser.close()


class Watched:
    """A page whose dialogs (alert, confirm) and uncaught errors are recorded: a hostile name
    that ran as script would open one or set the page's `__xss`."""

    def __init__(self, browser, base: str) -> None:
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.base = base
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.answers: list[str | bool] = []
        """What the next dialogs get: text for a prompt, True or False for a confirm; none: dismissed."""
        self.page.on("dialog", self._answer)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        # what the Content-Security-Policy refused (an inline style or script, of ours or of
        # the vendored chart library) is an error too, though the browser only logs it
        self.page.on("console", lambda message: self.errors.append(message.text)
                     if "Content Security Policy" in message.text else None)

    def _answer(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        answer = self.answers.pop(0) if self.answers else False
        if answer is False:
            dialog.dismiss()
        else:
            dialog.accept(answer if isinstance(answer, str) else "")

    def open(self, address: str = "#/"):
        return self.page.goto(f"{self.base}/{address}")

    def xss(self) -> object:
        return self.page.evaluate("() => window.__xss")

    def close(self) -> None:
        self.context.close()


def fact(page, name: str) -> str:
    """The value shown beside `name` in a view's list of facts."""
    return page.locator(f"dl.facts dt:text-is('{name}') + dd").first.inner_text()


def row_of(page, first_cell: str) -> list[str]:
    """The cells of the first table row whose first cell is `first_cell` ([] when none)."""
    rows = (row.locator("td").all_inner_texts() for row in page.locator("tbody tr").all())
    return next((cells for cells in rows if cells and cells[0] == first_cell), [])


def started_broker(tmp_path_factory, name: str, args: list[str] | None = None) -> Iterator[Standalone]:
    """A test module's standalone (yielded from its fixture): a fresh data dir, stopped after."""
    broker = Standalone(tmp_path_factory.mktemp(name) / "data", args=args or []).start()
    yield broker
    broker.stop()


def checked_page(browser, broker: Standalone) -> Iterator[Watched]:
    """A page for one test (yielded from its fixture), checked after it for errors and any
    hostile name that ran as script."""
    watched = Watched(browser, broker.admin_url)
    yield watched
    assert watched.errors == [] and watched.xss() is None
    watched.close()
