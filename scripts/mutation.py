"""Mutation testing of the code whose bugs the suite once let through (docs/testing.md).

Usage: python scripts/mutation.py [--report] [--children N] [--lock FILE] [TARGET ...]

Runs mutmut (the [tool.mutmut] section of pyproject.toml says which modules are mutated
and which in-process unit tests run against them) one target at a time, then prints, per
target, how many mutants the tests killed and how many survived. TARGET is any of the
names below (all of them when none is given). --report prints the table of the last run
without running anything. --lock takes FILE with flock(1) around each target's run, so
runs on a shared machine take turns with other heavy jobs. Each run starts from a fresh mutants/ directory, so it always
mutates the code as it is now; hypothesis draws the same examples every time (profile
"mutation" in tests/conftest.py), so a verdict does not change from run to run.

Survivors are listed by `mutmut results`, and `mutmut show NAME` prints one as a diff.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "mutants"
#: target -> the mutant names (module globs) it covers
TARGETS: dict[str, list[str]] = {
    "wire": [f"magnetar.wire.{module}.*" for module in
             ("batch", "client_commands", "commands", "compression", "entry", "frames", "message_id", "topic_name")],
    "selector": ["magnetar.broker.entry_filters.selector.*", "magnetar.broker.entry_filters.selector_filter.*"],
    "compaction": ["magnetar.wire.compaction.*", "magnetar.broker.compaction.compactor.*"],
    "acks": ["magnetar.storage.cursor.*", "magnetar.storage.range_set.*",
             "magnetar.broker.topics.persistent.persistent_subscription.*"],
    "key_shared": ["magnetar.broker.topics.consumer_selectors.*"],
    "schemas": [f"magnetar.schemas.{module}.*" for module in ("compatibility", "avro_resolution", "definitions")],
    **{f"kafka_{module}": [f"magnetar.kafka.{module}.*"] for module in ("groups", "idempotence", "fetch", "produce")},
    "kafka-admin": [f"magnetar.kafka.{module}.*" for module in
                    ("admin_apis", "config_apis", "topic_configs", "topic_settings", "topics", "access", "sasl",
                     "errors")],
}
#: mutmut's exit codes of a mutant's test run, as its `results` names them
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped",
          36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout"}


def mutmut() -> str:
    return str(Path(sys.executable).with_name("mutmut"))


def run(targets: list[str], children: int, lock: str | None) -> None:
    shutil.rmtree(MUTANTS, ignore_errors=True)
    env = {**os.environ, "HYPOTHESIS_PROFILE": "mutation"}
    for target in targets:
        command = [mutmut(), "run", "--max-children", str(children), *TARGETS[target]]
        if lock:
            command = ["flock", lock, *command]
        log = ROOT / f"mutation-{target}.log"
        print(f"== {target} (log: {log.name})", flush=True)
        with log.open("w") as out:
            subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=out, stderr=subprocess.STDOUT)


def verdicts() -> dict[str, int | None]:
    """Every mutant of the last run with its exit code (None: not run)."""
    out: dict[str, int | None] = {}
    for meta in MUTANTS.rglob("*.py.meta"):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def report(targets: list[str]) -> dict[str, Counter[str]]:
    results = verdicts()
    table: dict[str, Counter[str]] = {}
    for target in targets:
        counts: Counter[str] = Counter()
        for name, code in results.items():
            if any(fnmatch.fnmatch(name, pattern) for pattern in TARGETS[target]):
                counts[STATUS.get(code, "suspicious") if code is not None else "not run"] += 1
        table[target] = counts
    print(f"{'target':<12}{'mutants':>8}{'killed':>8}{'survived':>9}{'no tests':>9}{'timeout':>8}  killed %")
    for target, counts in table.items():
        total = sum(counts.values())
        tested = total - counts["no tests"] - counts["not run"]
        rate = 100 * (counts["killed"] + counts["timeout"]) / tested if tested else 0.0
        print(f"{target:<12}{total:>8}{counts['killed']:>8}{counts['survived']:>9}{counts['no tests']:>9}"
              f"{counts['timeout']:>8}  {rate:.1f}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help=f"any of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--report", action="store_true", help="print the last run's table only")
    parser.add_argument("--children", type=int, default=os.cpu_count() or 2, help="mutants tested at once")
    parser.add_argument("--lock", metavar="FILE", help="run each target under flock FILE")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}: choose from {', '.join(TARGETS)}")
    targets = args.targets or list(TARGETS)
    if not args.report:
        run(targets, args.children, args.lock)
    report(targets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
