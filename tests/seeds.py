"""The run's fresh seed: drawn once per `pytest` run, shared by every pytest-xdist worker.

Randomized tests put one fresh seed beside their fixed ones in their parameters, so the
ids must be the same in every worker process (xdist refuses a run whose workers collected
different tests). The seed is drawn in the controlling process (tests/conftest.py's
`pytest_configure`, before any worker starts) and reaches the workers in the environment.
"""

from __future__ import annotations

import os
import random

RUN_SEED_VARIABLE = "MAGNETAR_RUN_SEED"


def draw_run_seed() -> None:
    """Draws the run's seed unless the environment already names one (a replay, or a worker)."""
    os.environ.setdefault(RUN_SEED_VARIABLE, str(random.SystemRandom().randrange(1_000_000)))


def fresh_seed() -> int:
    """This run's fresh seed (conftest draws it before collection)."""
    return int(os.environ[RUN_SEED_VARIABLE])
