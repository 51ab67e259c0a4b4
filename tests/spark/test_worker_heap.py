"""The Python workers' garbage-collector settings, checked in a fresh interpreter (they are
process-wide: freezing the test process's heap would change every later test)."""

from __future__ import annotations

import subprocess
import sys

FREEZE_TWICE = """
import gc
import pyarrow  # what a worker has imported by its first read
from magnetar.spark.worker_heap import freeze_long_lived
freeze_long_lived()
first = gc.get_freeze_count()
made_since = [[i] for i in range(5000)]
freeze_long_lived()
print(first, gc.get_freeze_count())
"""


def test_a_worker_freezes_what_it_holds_at_its_first_read_and_only_then() -> None:
    """Spark's daemon collects after every task: what is frozen it no longer walks. Later
    reads must not freeze again, or each task's leftovers would be kept for good."""
    out = subprocess.run([sys.executable, "-c", FREEZE_TWICE], capture_output=True, text=True, check=True)
    first, second = map(int, out.stdout.split())
    assert first > 15_000  # the imported modules' objects
    assert second == first
