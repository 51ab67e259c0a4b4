"""benchmarks/functions_bench.py runs end to end on a tiny size and reports every figure, so a
change of the worker that breaks it (it finds the instance's process, times its start) shows
here rather than as nonsense in a later measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_the_isolation_benchmark_reports_both_settings_and_the_script() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "functions_bench.py"), "--messages", "300", "--runs", "1"],
                          capture_output=True, text=True, timeout=240, check=False, cwd=BENCHMARKS, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    for kind in ("bubblewrap", "none"):
        assert report[kind]["msg_per_s"] > 0 and report[kind]["cpu_us_per_msg"] >= 0
        assert 0 < report[kind]["create_s"] <= report[kind]["consuming_s"] < 60
    assert report["script"]["msg_per_s"] > 0
    assert report["rate_ratio_bubblewrap_to_none"] > 0 and report["start_ratio_bubblewrap_to_none"] > 0


def test_the_guarantees_benchmark_reports_each_guarantee() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARKS / "functions_bench.py"), "--compare", "guarantees",
                           "--messages", "300", "--runs", "1"],
                          capture_output=True, text=True, timeout=240, check=False, cwd=BENCHMARKS, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    for kind in ("atleast_once", "effectively_once_dedup", "effectively_once_txn"):
        assert report[kind]["msg_per_s"] > 0 and 0 < report[kind]["create_s"] <= report[kind]["consuming_s"] < 60
    assert report["rate_ratio_txn_to_atleast_once"] is not None and report["rate_ratio_txn_to_dedup"] is not None
