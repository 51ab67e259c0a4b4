"""The `magnetar` command line: `standalone` runs a broker, `admin` drives one over its REST
API with pulsar-admin's verbs and flags, `client` and `perf` produce and consume with
pulsar-client's and pulsar-perf's, `tokens` makes keys and tokens as
`pulsar tokens` does.

Exit codes: 0 done, 1 the broker refused or could not be reached, 2 a usage error,
130 interrupted; see `parsing` for how a command line is read and a failure reported.

Layering: the top of what ships, under only magnetar.testing: may import every other package
(each command its own, on demand); nothing but magnetar.testing and `python -m magnetar`
imports it. Enforced by import-linter (pyproject.toml).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from magnetar import __version__
from magnetar.cli.parsing import CommandParser, run_command

#: Each command's module, in the order `magnetar --help` lists them. A command line that
#: names one imports that module only: `magnetar standalone` has no use for the admin
#: client's HTTP stack or the perf tool's histograms, and start-up time is import time.
COMMANDS = {name: f"magnetar.cli.{name}" for name in ("standalone", "admin", "client", "perf", "compact", "tokens")}


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: with `command`, only that command's (enough to run it)."""
    top = CommandParser(prog="magnetar", description="A Pulsar-protocol message broker in Python.")
    top.add_argument("--version", action="version", version=f"magnetar {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        if command in (None, name):
            importlib.import_module(module).register(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    return run_command(args)
