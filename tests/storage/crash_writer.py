"""Child process of test_crash: appends forever, printing each entry once it is durable.

Payloads are derived from their sequence number, so the parent can check every byte
without being told what was written.

Usage: crash_writer.py DATA_DIR FIRST_INDEX [MAX_OPEN_FILES]. With MAX_OPEN_FILES, every
entry is also appended to a second topic (CHURN_TOPIC) through a file pool that small, so
the two topics' ledgers keep evicting each other's files between groups.
"""

import random
import sys
import threading
from pathlib import Path

from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory, Position

TOPIC = "persistent://public/default/crash-partition-0"
CHURN_TOPIC = "persistent://public/default/crash-churn"
MAX_IN_FLIGHT = 256


def payload(i: int) -> bytes:
    size = random.Random(i).choice([0, 1, 100, 1000, 4096, 20_000, 70_000])
    return (i.to_bytes(8, "big") * (size // 8 + 1))[:size]


def main() -> None:
    churning = len(sys.argv) > 3
    pool = {"max_open_files": int(sys.argv[3])} if churning else {}
    factory = ManagedLedgerFactory(Path(sys.argv[1]), ManagedLedgerConfig(max_entries_per_ledger=37, **pool))
    ml = factory.open(TOPIC)
    churn = factory.open(CHURN_TOPIC) if churning else None
    in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
    out = sys.stdout

    def reporter(i: int):
        def on_durable(position: Position | None, error: BaseException | None) -> None:
            if error is None:
                out.write(f"{i} {position.ledger_id} {position.entry_id}\n")
                out.flush()
            in_flight.release()

        return on_durable

    i = int(sys.argv[2])
    while True:
        in_flight.acquire()
        ml.append(payload(i), reporter(i))
        if churn is not None:
            churn.append(payload(i))
        i += 1


if __name__ == "__main__":
    main()
