"""`magnetar tokens ...`: keys and tokens for token authentication, with the verbs and
flags of `pulsar tokens` (create-secret-key, create-key-pair, create, show, validate)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from magnetar.broker.auth.algorithms import ASYMMETRIC_ALGORITHMS, HMAC_ALGORITHMS
from magnetar.cli.parsing import add_log_level


def _algorithm(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument("-a", "--signature-algorithm", "--algorithm", dest="algorithm", default=default,
                        choices=[*HMAC_ALGORITHMS, *ASYMMETRIC_ALGORITHMS], metavar="ALGORITHM",
                        help=f"signature algorithm (default {default or 'by key: HS256 or RS256'})")


def _verb(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from magnetar.cli import token_verbs  # noqa: PLC0415 (PyJWT and cryptography, only when needed)

        return getattr(token_verbs, name)(args)
    return run


def register(commands: argparse._SubParsersAction) -> None:
    tokens = commands.add_parser("tokens", help="make keys and tokens for token authentication",
                                 description="Keys and tokens for token authentication, as `pulsar tokens`.")
    verbs = tokens.add_subparsers(dest="verb", required=True, metavar="VERB")
    secret = verbs.add_parser("create-secret-key", help="a new secret key for HS256/384/512 tokens")
    _algorithm(secret, "HS256")
    secret.add_argument("-o", "--output", type=Path, help="write the key to this file (raw bytes)")
    secret.add_argument("-b", "--base64", action="store_true", help="print the key base64-encoded")
    secret.set_defaults(run=_verb("_create_secret_key"))
    pair = verbs.add_parser("create-key-pair", help="a new key pair for RS/ES tokens (DER files)")
    _algorithm(pair, "RS256")
    pair.add_argument("--output-private-key", type=Path, required=True)
    pair.add_argument("--output-public-key", type=Path, required=True)
    pair.set_defaults(run=_verb("_create_key_pair"))
    create = verbs.add_parser("create", help="a new token for a role")
    _algorithm(create, None)
    create.add_argument("-s", "--subject", required=True, help="the role the token names")
    create.add_argument("-e", "--expiry-time", help="relative expiry: 30s, 10m, 2h, 7d, 1w, 1y (default: never)")
    keys = create.add_mutually_exclusive_group(required=True)
    keys.add_argument("-sk", "--secret-key", help="data:;base64,..., file:///path, or a path")
    keys.add_argument("-pk", "--private-key", help="data:;base64,..., file:///path, or a path")
    create.add_argument("--headers", action="append", default=[], metavar="KEY=VALUE", help="a token header")
    create.set_defaults(run=_verb("_create"))
    show = verbs.add_parser("show", help="print a token's header and claims (without checking it)")
    _token_source(show)
    show.set_defaults(run=_verb("_show"))
    validate = verbs.add_parser("validate", help="check a token's signature and expiry")
    _token_source(validate)
    _algorithm(validate, None)
    validate_keys = validate.add_mutually_exclusive_group(required=True)
    validate_keys.add_argument("-sk", "--secret-key")
    validate_keys.add_argument("-pk", "--public-key")
    validate.set_defaults(run=_verb("_validate"))
    for verb in (secret, pair, create, show, validate):
        add_log_level(verb)


def _token_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", nargs="?", help="the token")
    parser.add_argument("-i", "--stdin", action="store_true", help="read the token from standard input")
    parser.add_argument("-f", "--token-file", type=Path, help="read the token from this file")


