"""Prometheus' text exposition format: label sets and sample values as /metrics writes them.

What the broker's metrics (magnetar.admin.metrics) and the functions worker's
(magnetar.functions.stats_view) share, so both escape label values and print numbers alike
on the one page Prometheus scrapes. Text only, knowing no broker: each caller says what it
measures. A module of its own at the bottom of the layers, as either side may use it without
importing the other.
"""

from __future__ import annotations

from collections.abc import Iterable


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_text(pairs: Iterable[tuple[str, str]]) -> str:
    """Label pairs as exposition text, values escaped."""
    return ",".join(f'{key}="{_escape(value)}"' for key, value in pairs)


def number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
