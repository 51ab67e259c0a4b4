"""The built-in `selector` entry filter: a message selector (see selector.py) per subscription.

The selector is the subscription property `selector`, else the consumer's (the official
client's `properties=` on subscribe). Entries whose properties satisfy it are delivered;
the rest are acknowledged for that subscription without being sent. No selector: every
entry is delivered.
"""

from __future__ import annotations

from magnetar.broker.entry_filters import FilterContext, FilterEntry, FilterResult
from magnetar.broker.entry_filters.selector import Condition, SelectorError, compile_selector

SELECTOR_PROPERTY = "selector"


def _selector_text(context: FilterContext) -> str | None:
    return context.subscription_properties.get(SELECTOR_PROPERTY) or context.consumer_metadata.get(SELECTOR_PROPERTY)


class SelectorEntryFilter:
    def __init__(self) -> None:
        self._last: tuple[FilterContext | None, Condition | None] = (None, None)

    def filter_entry(self, entry: FilterEntry, context: FilterContext) -> FilterResult:
        condition = self._condition(context)
        if condition is None or condition(entry.properties) is True:
            return FilterResult.ACCEPT
        return FilterResult.REJECT

    def _condition(self, context: FilterContext) -> Condition | None:
        """The compiled selector of `context`; dispatch judges runs of entries for one
        consumer, so remembering the last context skips the lookups on most entries."""
        last_context, condition = self._last
        if context is not last_context:
            text = _selector_text(context)
            condition = compile_selector(text) if text else None
            self._last = (context, condition)
        return condition

    def check_subscription(self, context: FilterContext) -> None:
        text = _selector_text(context)
        if text:
            try:
                compile_selector(text)
            except SelectorError as exc:
                raise ValueError(str(exc)) from None
