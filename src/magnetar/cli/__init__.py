"""The `magnetar` command line: `standalone` runs a broker, `admin` drives one over its REST
API with pulsar-admin's verbs and flags, `client` and `perf` produce and consume with
pulsar-client's and pulsar-perf's, `tokens` makes keys and tokens as
`pulsar tokens` does.

Exit codes: 0 done, 1 the broker refused or could not be reached, 2 a usage error,
130 interrupted; see `parsing` for how a command line is read and a failure reported.
"""

from __future__ import annotations

import argparse

from magnetar import __version__
from magnetar.cli import admin, client, compact, perf, standalone, tokens
from magnetar.cli.parsing import CommandParser, run_command


def parser() -> argparse.ArgumentParser:
    top = CommandParser(prog="magnetar", description="A Pulsar-protocol message broker in Python.")
    top.add_argument("--version", action="version", version=f"magnetar {__version__}")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    standalone.register(commands)
    admin.register(commands)
    client.register(commands)
    perf.register(commands)
    compact.register(commands)
    tokens.register(commands)
    return top


def main(argv: list[str] | None = None) -> int:
    return run_command(parser().parse_args(argv))
