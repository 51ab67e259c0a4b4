"""A verb of `magnetar admin`: its name, help, action and argparse arguments."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from magnetar.admin_client import AdminClient

Action = Callable[[AdminClient, argparse.Namespace], Any]


@dataclass(frozen=True)
class Verb:
    name: str
    help: str
    action: Action
    arguments: list[tuple[tuple[str, ...], dict[str, Any]]] = field(default_factory=list)


def arg(*flags: str, **options: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    return flags, options
