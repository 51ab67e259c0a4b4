"""Message and byte counters with the rates Pulsar's stats report.

Counting is two integer additions on the publish and dispatch paths; rates are
worked out only when the broker's stats timer (`statsUpdateFrequencyInSecs`)
samples the counters, as Pulsar does, so a stats request never costs a pass
over history.
"""

from __future__ import annotations

import time


class MessageCounter:
    """Messages and bytes since the owner was loaded, and their rates over the last interval."""

    __slots__ = ("_sampled_at", "_sampled_bytes", "_sampled_messages", "byte_rate", "bytes", "message_rate",
                 "messages")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.message_rate = 0.0
        self.byte_rate = 0.0
        self._sampled_messages = 0
        self._sampled_bytes = 0
        self._sampled_at = time.monotonic()

    def add(self, messages: int, size: int) -> None:
        self.messages += messages
        self.bytes += size

    def sample(self, now: float) -> None:
        """Rates since the previous sample."""
        elapsed = now - self._sampled_at
        if elapsed <= 0:
            return
        self.message_rate = (self.messages - self._sampled_messages) / elapsed
        self.byte_rate = (self.bytes - self._sampled_bytes) / elapsed
        self._sampled_messages, self._sampled_bytes, self._sampled_at = self.messages, self.bytes, now

    @property
    def average_size(self) -> float:
        """Pulsar's averageMsgSize: bytes per message over the last interval."""
        return self.byte_rate / self.message_rate if self.message_rate else 0.0


class FilterCounters:
    """A subscription's entry-filter verdicts, under Pulsar's stats names (in messages, a
    batch counting as its size)."""

    __slots__ = ("accepted", "processed", "rejected", "rescheduled")

    def __init__(self) -> None:
        self.processed = self.accepted = self.rejected = self.rescheduled = 0

    def stats(self) -> dict[str, int]:
        return {"filterProcessedMsgCount": self.processed, "filterAcceptedMsgCount": self.accepted,
                "filterRejectedMsgCount": self.rejected, "filterRescheduledMsgCount": self.rescheduled}
