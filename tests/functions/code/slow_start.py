"""Imports at once when the worker checks it, in a minute when an instance starts it, holding
Python's lock all along (no other thread of the process runs meanwhile): a broker killed
then must take the instance with it, whatever the instance's own threads could do."""

import inspect
import sys
import time


def _checking() -> bool:
    """Whether this import is the worker's check (its handoff says so; `--check` before)."""
    if "--check" in sys.argv:
        return True
    return any(isinstance(frame.frame.f_locals.get("handoff"), dict) and frame.frame.f_locals["handoff"].get("check")
               for frame in inspect.stack())


if not _checking():
    print("importing slowly", flush=True)
    sys.setswitchinterval(3600)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        pass
    sys.setswitchinterval(0.005)


def process(input):
    return input
