"""List the keys of Pulsar conf files that magnetar's key set lacks (or still has).

Usage: python scripts/pulsar_conf_keys.py broker.conf standalone.conf [--stale]

Reads the files given (Pulsar's conf/broker.conf and conf/standalone.conf of the
release to catch up with) and prints, one a line, every key they document that
src/magnetar/broker/pulsar_keys.py does not have, so the set can be refreshed by
hand. A key counts when it is set (`key=value`, read as Java properties) or shown
commented out as `#key=value`; keys named only in prose do not. With --stale it
prints instead the keys of the set that the files no longer document (keep those:
a file written for an older release may still carry them).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from magnetar.broker.properties import read_properties_file
from magnetar.broker.pulsar_keys import PULSAR_BROKER_KEYS

# `#key=value` with a camelCase or snake_case key: a documented key left commented out.
# Prose in comments ("# Default: 100 MB", "# Example : a,b") never matches: it has no `=`
# right after a single identifier.
_COMMENTED_KEY = re.compile(r"^\s*[#!]\s*([a-z][A-Za-z0-9_]*)\s*=", re.MULTILINE)


def documented_keys(path: Path) -> set[str]:
    """Keys set in the file plus keys shown commented out."""
    keys = {setting.key for setting in read_properties_file(path)}
    keys.update(_COMMENTED_KEY.findall(path.read_text(encoding="utf-8", errors="replace")))
    return keys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--stale", action="store_true", help="print keys of the set the files lack")
    args = parser.parse_args(argv)
    found: set[str] = set()
    for path in args.files:
        found |= documented_keys(path)
    listed = PULSAR_BROKER_KEYS - found if args.stale else found - PULSAR_BROKER_KEYS
    for key in sorted(listed):
        print(key)
    print(f"{len(found)} keys in the files, {len(PULSAR_BROKER_KEYS)} in the set, {len(listed)} listed",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
