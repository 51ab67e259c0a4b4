"""The one door through which a message id from a client becomes a storage Position.

Clients write ledger and entry ids as uint64, and the official client names "nothing of
ledger L" as (L, -1), which arrives as 2^64-1. Read raw, that is an entry id past every
entry, and a cumulative ack of it acknowledges the whole ledger. Every command that
carries an id (ACK, SEEK, SUBSCRIBE start ids, REDELIVER) goes through here.
"""

from __future__ import annotations

from magnetar.storage import Position
from magnetar.wire.message_id import to_signed64
from magnetar.wire.proto import pulsar_api_pb2 as pb


def position_of(mid: pb.MessageIdData) -> Position:
    return Position(to_signed64(mid.ledgerId), to_signed64(mid.entryId))
