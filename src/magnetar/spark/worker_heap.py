"""The cyclic garbage collector in the Python workers that read rows for Spark.

Reading makes millions of short-lived acyclic objects and keeps a large, long-lived heap of
imported modules; the collector gains nothing from either and, run as CPython and Spark's
daemon run it, costs a large share of a worker's time. Refcounting frees what reads make.
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Decoding makes millions of short-lived acyclic objects; the cycle collector would
    rescan them again and again (a third of the time) for nothing. Refcounting frees them."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@functools.cache  # once per process (gc.get_freeze_count() would walk the frozen heap)
def freeze_long_lived() -> None:
    """Spark's Python daemon runs a full `gc.collect()` after every task of a reused worker.
    With pyarrow, pyspark and this package imported, that walks ~90,000 objects: 50 ms per
    task on an idle machine, over 150 ms on a busy one, a third of a worker's time in
    benchmarks/spark_payload_bench.py (16 partitions per query). What exists by a worker's
    first read is modules, classes and functions alive for the process's life, so it moves
    to the permanent generation (`gc.freeze`) once per process, after one collection so no
    garbage is kept; later collections walk only what later tasks made."""
    gc.collect()
    gc.freeze()
