"""Managed ledgers opened on a worker thread for the commands that load a topic.

Opening a topic's managed ledger the first time writes and fsyncs: its name's record in the
metadata store (one commit), its directory (recovery's fsync of it). On the event loop
each is a stall every client waits out, and a client creating topics one after another
(100 producers on new topics) made the loop's longest turns. PRODUCER and SUBSCRIBE open
it here instead and are handled again once it is open (TopicLoading); other callers
(admin, lookups, transactions) open it where they run, as before.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from magnetar.broker.errors import TopicLoading

if TYPE_CHECKING:
    from magnetar.storage import ManagedLedger, ManagedLedgerFactory


class LedgerOpenings:
    def __init__(self, factory: ManagedLedgerFactory) -> None:
        self._factory = factory
        self._opening: dict[str, asyncio.Future[ManagedLedger]] = {}
        """Opens under way or ended but not yet asked for again, by storage name."""

    def get(self, name: str) -> ManagedLedger:
        """The open managed ledger `name`; raises TopicLoading while it opens off the loop, and
        what its opening met when asked again after a failure (once: the next ask retries)."""
        ml = self._factory.opened(name)
        if ml is not None:
            return ml
        opening = self._opening.get(name)
        if opening is None:
            opening = asyncio.get_running_loop().run_in_executor(None, self._factory.open, name)
            self._opening[name] = opening
        elif opening.done():
            del self._opening[name]
            opening.result()
            return self.get(name)  # open now, unless closed again meanwhile: then opened anew
        raise TopicLoading(opening)
