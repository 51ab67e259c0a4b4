"""The built-in `selector` entry filter: a message selector (see selector.py) per subscription.

The selector is the subscription property `selector`, else the consumer's (the official
client's `properties=` on subscribe). Entries whose properties satisfy it are delivered;
the rest are acknowledged for that subscription without being sent. No selector: every
entry is delivered.
"""

from __future__ import annotations

from magnetar.broker.entry_filters import FilterContext, FilterEntry, FilterResult
from magnetar.broker.entry_filters.selector import SelectorError, compile_selector

SELECTOR_PROPERTY = "selector"


def _selector_text(context: FilterContext) -> str | None:
    return context.subscription_properties.get(SELECTOR_PROPERTY) or context.consumer_metadata.get(SELECTOR_PROPERTY)


class SelectorEntryFilter:
    def filter_entry(self, entry: FilterEntry, context: FilterContext) -> FilterResult:
        text = _selector_text(context)
        if not text:
            return FilterResult.ACCEPT
        return FilterResult.ACCEPT if compile_selector(text)(entry.properties) is True else FilterResult.REJECT

    def check_subscription(self, context: FilterContext) -> None:
        text = _selector_text(context)
        if text:
            try:
                compile_selector(text)
            except SelectorError as exc:
                raise ValueError(str(exc)) from None
