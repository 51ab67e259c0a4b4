"""Flag values shared by `magnetar client` and `magnetar perf`, spelled as pulsar-client and
pulsar-perf spell them, so that scripts written for those tools keep working.

The values are the protocol's numbers, which magnetar.client takes for its enums: every
`magnetar` command registers these flags, and `magnetar standalone` should not pay for
importing the client."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from magnetar.wire.proto import pulsar_api_pb2 as pb

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
Sub = pb.CommandSubscribe
SUBSCRIPTION_TYPES = {"Exclusive": Sub.Exclusive, "Shared": Sub.Shared, "Failover": Sub.Failover,
                      "Key_Shared": Sub.Key_Shared}
POSITIONS = {"Latest": Sub.Latest, "Earliest": Sub.Earliest}
COMPRESSIONS = {"NONE": pb.NONE, "LZ4": pb.LZ4, "ZLIB": pb.ZLIB, "ZSTD": pb.ZSTD, "SNAPPY": pb.SNAPPY}


def default_service_url() -> str:
    return os.environ.get("MAGNETAR_SERVICE_URL", DEFAULT_SERVICE_URL)


def _choice(table: dict[str, object], what: str, case_sensitive: bool = True) -> Callable[[str], object]:
    """An argparse type picking from `table`; the refusal lists the accepted spellings."""
    def parse(text: str) -> object:
        key = text if case_sensitive else text.upper()
        if key not in table:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}; use one of {', '.join(table)}")
        return table[key]
    return parse


subscription_type = _choice(SUBSCRIPTION_TYPES, "subscription type")
subscription_position = _choice(POSITIONS, "subscription position")
compression = _choice(COMPRESSIONS, "compression type", case_sensitive=False)


def properties(text: str) -> dict[str, str]:
    """`k1=v1,k2=v2`; the flag may repeat, and the caller merges the dictionaries."""
    result = {}
    for pair in filter(None, text.split(",")):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{pair!r} is not a property; write key=value")
        result[key] = value
    return result


def merged(dicts: list[dict[str, str]] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in dicts or ():
        out.update(part)
    return out


def non_negative(kind: type = int) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text!r} is negative")
        return value
    return parse


def add_service_url(parser: argparse.ArgumentParser, *flags: str) -> None:
    parser.add_argument(*flags, dest="service_url", default=default_service_url(),
                        help=f"the broker's service URL (default $MAGNETAR_SERVICE_URL or {DEFAULT_SERVICE_URL})")


def add_operation_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--operation-timeout", type=non_negative(float), default=30.0, metavar="SECONDS",
                        help="how long to wait for the broker, a restart included (the client's operation "
                             "timeout; default 30)")


def add_security(parser: argparse.ArgumentParser) -> None:
    """pulsar-client's and pulsar-admin's credential and TLS flags."""
    parser.add_argument("--auth-plugin", help="AuthenticationToken, AuthenticationTls or AuthenticationBasic "
                        "(org.apache.pulsar.client.impl.auth. names too)")
    parser.add_argument("--auth-params", default="", help="token:<jwt> or file:///path; "
                        'tlsCertFile:<path>,tlsKeyFile:<path>; {"userId": .., "password": ..}')
    parser.add_argument("--tls-trust-cert-path", help="CA certificates to check a TLS broker with")
    parser.add_argument("--tls-allow-insecure", action="store_true", help="do not check the broker's certificate")
    parser.add_argument("--tls-enable-hostname-verification", action="store_true",
                        help="check the broker's host name against its certificate")


def security_arguments(args: argparse.Namespace) -> dict[str, object]:
    """The Client/AdminClient keyword arguments of the `add_security` flags; ValueError names
    the flag at fault."""
    from magnetar.credentials.authentication import authentication_from_plugin  # noqa: PLC0415 (standalone need not load it)

    try:
        authentication = authentication_from_plugin(args.auth_plugin, args.auth_params) if args.auth_plugin else None
    except ValueError as exc:
        raise ValueError(f"--auth-plugin/--auth-params: {exc}") from None
    return {"authentication": authentication, "tls_trust_certs_file_path": args.tls_trust_cert_path,
            "tls_allow_insecure_connection": args.tls_allow_insecure,
            "tls_validate_hostname": args.tls_enable_hostname_verification}
