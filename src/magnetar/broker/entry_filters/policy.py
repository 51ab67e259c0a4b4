"""Which entry filters a topic runs, under Pulsar's keys and policies."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.broker.entry_filters import parse_names
from magnetar.broker.policies.topic_policies import Policy

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration
    from magnetar.broker.policies.topic_policies import TopicPolicies
    from magnetar.wire.topic_name import TopicName

#: Pulsar's EntryFilters policy JSON, `{"entryFilterNames": "a,b"}`, at both levels.
ENTRY_FILTERS = Policy("entryFilters", "entryFilters", "entryFilterNames")


def effective_filter_names(config: ServiceConfiguration, policies: TopicPolicies, topic: TopicName) -> list[str]:
    """Topic policy, else namespace policy, else `entryFilterNames`; the policies count only
    with `allowOverrideEntryFilters`, as in Pulsar."""
    if config.allowOverrideEntryFilters:
        value: Any = policies.configured(topic, ENTRY_FILTERS)
        if isinstance(value, dict) and "entryFilterNames" in value:
            return parse_names(value["entryFilterNames"])
    return list(config.entryFilterNames)
