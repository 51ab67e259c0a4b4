"""Child process of test_crash: appends forever, printing each entry once it is durable.

Payloads are derived from their sequence number, so the parent can check every byte
without being told what was written.
"""

import random
import sys
import threading
from pathlib import Path

from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory, Position

TOPIC = "persistent://public/default/crash-partition-0"
MAX_IN_FLIGHT = 256


def payload(i: int) -> bytes:
    size = random.Random(i).choice([0, 1, 100, 1000, 4096, 20_000, 70_000])
    return (i.to_bytes(8, "big") * (size // 8 + 1))[:size]


def main() -> None:
    factory = ManagedLedgerFactory(Path(sys.argv[1]), ManagedLedgerConfig(max_entries_per_ledger=37))
    ml = factory.open(TOPIC)
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
        i += 1


if __name__ == "__main__":
    main()
