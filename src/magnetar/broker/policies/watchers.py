"""Callbacks told of a change of stored resources (a namespace's policies, a topic's, a
cluster's data) after it is made, so what depends on them is revalidated at once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class Watchers(Generic[T]):
    def __init__(self) -> None:
        self._watchers: list[Callable[[T], None]] = []

    def add(self, watcher: Callable[[T], None]) -> None:
        self._watchers.append(watcher)

    def notify(self, changed: T) -> None:
        """Tell every watcher; one that raises is logged: the change is made, and a watcher's
        failure must not undo the answer to whoever made it."""
        for watcher in self._watchers:
            try:
                watcher(changed)
            except Exception:
                log.exception("watcher of %s failed", changed)
