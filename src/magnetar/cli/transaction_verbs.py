"""`magnetar admin transactions ...`: pulsar-admin's transactions verbs and flags (PIP-31).

    magnetar admin transactions coordinator-stats
    magnetar admin transactions transaction-metadata -m 0 -l 12
    magnetar admin transactions slow-transactions -t 30s
    magnetar admin transactions transaction-buffer-stats -t persistent://public/default/t
    magnetar admin transactions pending-ack-stats -t persistent://public/default/t -s sub
"""

from __future__ import annotations

import argparse

from magnetar.admin_client import AdminClient
from magnetar.admin_client.transactions import TransactionsAdmin
from magnetar.cli.parsing import topic_name
from magnetar.cli.verbs import Verb, arg


def _millis(text: str) -> int:
    """pulsar-admin's `-t/--time`: `1s`, `10s`, `1m`, `5h`, `3d`, or milliseconds as a number."""
    from magnetar.cli.admin import duration_seconds  # noqa: PLC0415 (admin imports this module)

    if text.strip().isdigit():
        return int(text)
    return duration_seconds(text) * 1000


def _txns(admin: AdminClient) -> TransactionsAdmin:
    return TransactionsAdmin(admin)


MOST = arg("-m", "--most-sig-bits", dest="most", type=int, required=True, help="the transaction id's most sig bits")
LEAST = arg("-l", "--least-sig-bits", dest="least", type=int, required=True,
            help="the transaction id's least sig bits")
TOPIC = arg("-t", "--topic", type=topic_name, required=True, help="persistent://tenant/namespace/topic")
SUBSCRIPTION = arg("-s", "--sub-name", dest="subscription", required=True, help="the subscription")
COORDINATOR = arg("-c", "--coordinator-id", dest="coordinator", type=int, help="one coordinator (default: all)")
LOW_WATER_MARKS = arg("-l", "--low-water-mark", dest="low_water_marks", action="store_true",
                      help="include the low water marks")


def _slow(admin: AdminClient, args: argparse.Namespace) -> object:
    return _txns(admin).slow_transactions(args.time, args.coordinator)


VERBS = [
    Verb("coordinator-stats", "show the transaction coordinators' stats",
         lambda a, n: _txns(a).coordinator_stats(n.coordinator), [COORDINATOR]),
    Verb("transaction-metadata", "show a transaction's status and participants",
         lambda a, n: _txns(a).transaction_metadata(n.most, n.least), [MOST, LEAST]),
    Verb("slow-transactions", "list the transactions open for longer than --time", _slow,
         [COORDINATOR, arg("-t", "--time", type=_millis, required=True, help="e.g. 1s, 10s, 1m, 5h, 3d")]),
    Verb("transaction-buffer-stats", "show a topic's transaction buffer",
         lambda a, n: _txns(a).transaction_buffer_stats(n.topic, n.low_water_marks), [TOPIC, LOW_WATER_MARKS]),
    Verb("pending-ack-stats", "show the acknowledgements open transactions hold on a subscription",
         lambda a, n: _txns(a).pending_ack_stats(n.topic, n.subscription, n.low_water_marks),
         [TOPIC, SUBSCRIPTION, LOW_WATER_MARKS]),
    Verb("transaction-in-buffer-stats", "show what a topic's buffer holds of a transaction",
         lambda a, n: _txns(a).transaction_in_buffer_stats(n.most, n.least, n.topic), [MOST, LEAST, TOPIC]),
    Verb("transaction-in-pending-ack-stats", "show what a subscription holds for a transaction",
         lambda a, n: _txns(a).transaction_in_pending_ack_stats(n.most, n.least, n.topic, n.subscription),
         [MOST, LEAST, TOPIC, SUBSCRIPTION]),
]
