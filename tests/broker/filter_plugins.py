"""Entry filters the tests load into a real broker by `module:Class` name."""

from __future__ import annotations

from magnetar.broker.entry_filters import FilterContext, FilterEntry, FilterResult


class RescheduleOnce:
    """Reschedules each entry the first time it sees it."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, int]] = set()

    def filter_entry(self, entry: FilterEntry, context: FilterContext) -> FilterResult:
        key = tuple(entry.position)
        if key in self.seen:
            return FilterResult.ACCEPT
        self.seen.add(key)  # type: ignore[arg-type]
        return FilterResult.RESCHEDULE


class Raising:
    def filter_entry(self, entry: FilterEntry, context: FilterContext) -> FilterResult:
        raise RuntimeError("this filter always fails")


class RejectOdd:
    """Rejects entries whose `n` property is odd; says nothing of the rest."""

    def filter_entry(self, entry: FilterEntry, context: FilterContext) -> FilterResult:
        n = entry.properties.get("n")
        return FilterResult.REJECT if n is not None and int(n) % 2 else FilterResult.ACCEPT


class RejectAll:
    def filter_entry(self, entry: FilterEntry, context: FilterContext) -> FilterResult:
        return FilterResult.REJECT
