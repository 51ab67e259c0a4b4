"""`magnetar tokens ...`: keys and tokens for token authentication, with the verbs and
flags of `pulsar tokens` (create-secret-key, create-key-pair, create, show, validate)."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any

import jwt

from magnetar.broker.auth.tokens import (
    ASYMMETRIC_ALGORITHMS,
    HMAC_ALGORITHMS,
    KeyMaterialError,
    create_token,
    load_private_key,
    load_public_key,
    new_key_pair,
    new_secret_key,
    parse_duration,
    read_key_material,
    secret_key,
)


def _algorithm(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument("-a", "--signature-algorithm", "--algorithm", dest="algorithm", default=default,
                        choices=[*HMAC_ALGORITHMS, *ASYMMETRIC_ALGORITHMS], metavar="ALGORITHM",
                        help=f"signature algorithm (default {default or 'by key: HS256 or RS256'})")


def register(commands: argparse._SubParsersAction) -> None:
    tokens = commands.add_parser("tokens", help="make keys and tokens for token authentication",
                                 description="Keys and tokens for token authentication, as `pulsar tokens`.")
    verbs = tokens.add_subparsers(dest="verb", required=True, metavar="VERB")
    secret = verbs.add_parser("create-secret-key", help="a new secret key for HS256/384/512 tokens")
    _algorithm(secret, "HS256")
    secret.add_argument("-o", "--output", type=Path, help="write the key to this file (raw bytes)")
    secret.add_argument("-b", "--base64", action="store_true", help="print the key base64-encoded")
    secret.set_defaults(run=_create_secret_key)
    pair = verbs.add_parser("create-key-pair", help="a new key pair for RS/ES tokens (DER files)")
    _algorithm(pair, "RS256")
    pair.add_argument("--output-private-key", type=Path, required=True)
    pair.add_argument("--output-public-key", type=Path, required=True)
    pair.set_defaults(run=_create_key_pair)
    create = verbs.add_parser("create", help="a new token for a role")
    _algorithm(create, None)
    create.add_argument("-s", "--subject", required=True, help="the role the token names")
    create.add_argument("-e", "--expiry-time", help="relative expiry: 30s, 10m, 2h, 7d, 1w, 1y (default: never)")
    keys = create.add_mutually_exclusive_group(required=True)
    keys.add_argument("-sk", "--secret-key", help="data:;base64,..., file:///path, or a path")
    keys.add_argument("-pk", "--private-key", help="data:;base64,..., file:///path, or a path")
    create.add_argument("--headers", action="append", default=[], metavar="KEY=VALUE", help="a token header")
    create.set_defaults(run=_create)
    show = verbs.add_parser("show", help="print a token's header and claims (without checking it)")
    _token_source(show)
    show.set_defaults(run=_show)
    validate = verbs.add_parser("validate", help="check a token's signature and expiry")
    _token_source(validate)
    _algorithm(validate, None)
    validate_keys = validate.add_mutually_exclusive_group(required=True)
    validate_keys.add_argument("-sk", "--secret-key")
    validate_keys.add_argument("-pk", "--public-key")
    validate.set_defaults(run=_validate)


def _token_source(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", nargs="?", help="the token")
    parser.add_argument("-i", "--stdin", action="store_true", help="read the token from standard input")
    parser.add_argument("-f", "--token-file", type=Path, help="read the token from this file")


def _fail(message: str) -> int:
    print(f"magnetar tokens: {message}", file=sys.stderr)
    return 2


def _create_secret_key(args: argparse.Namespace) -> int:
    if args.algorithm not in HMAC_ALGORITHMS:
        return _fail(f"--signature-algorithm {args.algorithm} is not a secret-key algorithm "
                     f"({', '.join(HMAC_ALGORITHMS)})")
    key = new_secret_key(args.algorithm)
    output = base64.b64encode(key) + b"\n" if args.base64 else key
    if args.output is not None:
        args.output.write_bytes(output)
    else:
        sys.stdout.buffer.write(output)
    return 0


def _create_key_pair(args: argparse.Namespace) -> int:
    if args.algorithm not in ASYMMETRIC_ALGORITHMS:
        return _fail(f"--signature-algorithm {args.algorithm} is not a key-pair algorithm "
                     f"({', '.join(ASYMMETRIC_ALGORITHMS)})")
    private, public = new_key_pair(args.algorithm)
    args.output_private_key.write_bytes(private)
    args.output_public_key.write_bytes(public)
    return 0


def _create(args: argparse.Namespace) -> int:
    try:
        expires_in = parse_duration(args.expiry_time) if args.expiry_time else None
    except ValueError as exc:
        return _fail(f"--expiry-time: {exc}")
    headers = {}
    for item in args.headers:
        name, sep, value = item.partition("=")
        if not sep:
            return _fail(f"--headers {item!r}: expected KEY=VALUE")
        headers[name] = value
    try:
        if args.secret_key:
            key: Any = secret_key(read_key_material(args.secret_key))
            algorithm = args.algorithm or "HS256"
        else:
            key = load_private_key(read_key_material(args.private_key))
            algorithm = args.algorithm or "RS256"
        print(create_token(args.subject, key, algorithm, expires_in=expires_in, headers=headers or None))
    except KeyMaterialError as exc:
        return _fail(f"{'--secret-key' if args.secret_key else '--private-key'}: {exc}")
    except (jwt.InvalidKeyError, TypeError, ValueError) as exc:
        return _fail(f"cannot sign with {algorithm} and that key: {exc}")
    return 0


def _read_token(args: argparse.Namespace) -> str | None:
    if args.stdin:
        return sys.stdin.read().strip()
    if args.token_file is not None:
        return args.token_file.read_text().strip()
    return args.token


def _show(args: argparse.Namespace) -> int:
    token = _read_token(args)
    if not token:
        return _fail("give a token, -f FILE or -i")
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        return _fail(f"not a token: {exc}")
    print(json.dumps(header))
    print("---")
    print(json.dumps(claims))
    return 0


def _validate(args: argparse.Namespace) -> int:
    token = _read_token(args)
    if not token:
        return _fail("give a token, -f FILE or -i")
    try:
        if args.secret_key:
            key: Any = secret_key(read_key_material(args.secret_key))
            algorithms = [args.algorithm] if args.algorithm else list(HMAC_ALGORITHMS)
        else:
            key = load_public_key(read_key_material(args.public_key))
            algorithms = [args.algorithm or "RS256"]
        claims = jwt.decode(token, key, algorithms=algorithms, options={"verify_aud": False})
    except KeyMaterialError as exc:
        return _fail(str(exc))
    except jwt.InvalidTokenError as exc:
        print(f"invalid token: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(claims))
    return 0
