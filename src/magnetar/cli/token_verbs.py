"""The verbs of `magnetar tokens`, loaded only when one runs: they need PyJWT and
cryptography, which no other command (magnetar standalone included) should pay for."""

from __future__ import annotations

import argparse
import base64
import json
import sys
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
