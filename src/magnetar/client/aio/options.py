"""The official client's arguments (`pulsar.Client(...)`, `create_producer`, `subscribe`,
`create_reader`) turned into magnetar's configuration, or refused naming the argument.

Every argument the official client takes either works here or, given a value other than its
default, raises InvalidConfiguration saying why: nothing is taken and silently ignored.
Arguments may be the official package's objects (its ConsumerDeadLetterPolicy,
ConsumerKeySharedPolicy, ConsumerBatchReceivePolicy, enums) or magnetar.client's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.aio.consumer_config import BatchReceivePolicy, ConsumerConfig
from magnetar.client.aio.letters import DeadLetterPolicy
from magnetar.client.crypto.key_reader import CryptoKeyReader
from magnetar.client.enums import ConsumerCryptoFailureAction, RegexSubscriptionMode
from magnetar.client.message_id import MessageId, as_message_id
from magnetar.client.url import parse_service_url
from magnetar.formats.processor import ProcessorSet, resolve_processors

if TYPE_CHECKING:
    from magnetar.client.schema import Schema

#: Official arguments taken here only at values that change nothing: the values, and why.
_ONLY_DEFAULT: dict[str, tuple[tuple[Any, ...], str]] = {
    "io_threads": ((1,), "magnetar.client does its I/O on one event loop (a thread per blocking Client)"),
    "message_listener_threads": ((1,), "message listeners are not supported: receive, or iterate (`async for`)"),
    "log_conf_file_path": ((None,), "magnetar.client logs through Python's logging, not log4cxx: configure "
                                    "logging.getLogger('magnetar.client')"),
    "logger": ((None,), "magnetar.client logs through Python's logging: give a logging.Logger (pulsar's "
                        "ConsoleLogger and FileLogger configure the official client's C++ core), or configure "
                        "logging.getLogger('magnetar.client')"),
    "stats_interval_in_seconds": ((600, 0), "magnetar.client logs no periodic statistics (0, none, is taken)"),
    "broker_consumer_stats_cache_time_ms": ((30000,), "magnetar.client has no call for a consumer's broker "
                                                      "statistics, so nothing to cache"),
    "auto_ack_oldest_chunked_message_on_queue_full": ((False,), "magnetar.client never acknowledges the chunks of "
                                                                "a message it drops past max_pending_chunked_message"),
    "lazy_start_partitioned_producers": ((False,), "magnetar.client starts every partition's producer with the "
                                                   "partitioned producer"),
}


CLIENT_LOGGER = "magnetar.client"


class _HandedOn(logging.Handler):
    """Hands magnetar.client's records to the logger a Client was given."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self.target.isEnabledFor(record.levelno):
            self.target.handle(record)


def use_logger(logger: logging.Logger) -> None:
    """The official Python client takes a `logging.Logger` and logs only there: magnetar.client's
    records (`magnetar.client` and below, one logger for the process) are handed to it, at its
    level, and no longer propagate to the root logger."""
    ours = logging.getLogger(CLIENT_LOGGER)
    if not any(isinstance(handler, _HandedOn) and handler.target is logger for handler in ours.handlers):
        ours.addHandler(_HandedOn(logger))
    ours.setLevel(logger.getEffectiveLevel())
    ours.propagate = False


def refuse_unsupported(**given: Any) -> None:
    """InvalidConfiguration for the first argument given a value magnetar.client cannot honour."""
    for name, value in given.items():
        taken, why = _ONLY_DEFAULT[name]
        if value not in taken:
            raise errors.InvalidConfiguration(f"{name}={value!r} is not supported: {why}")


def check_tls(service_url: str, use_tls: bool, certificate: str | None, private_key: str | None
              ) -> tuple[str, str] | None:
    """`use_tls` (the URL decides, so it must agree) and the client certificate shown in the TLS
    handshake (`tls_certificate_file_path` with `tls_private_key_file_path`), as a pair or None."""
    if use_tls and not parse_service_url(service_url).tls:
        raise errors.InvalidConfiguration(f"use_tls=True needs a pulsar+ssl:// or https:// service URL, not "
                                          f"{service_url!r}: the URL says whether TLS is used")
    if (certificate is None) != (private_key is None):
        given, missing = (("tls_certificate_file_path", "tls_private_key_file_path") if private_key is None
                          else ("tls_private_key_file_path", "tls_certificate_file_path"))
        raise errors.InvalidConfiguration(f"{given} needs {missing}: the certificate and its key go together")
    return None if certificate is None or private_key is None else (certificate, private_key)


def counted(name: str, value: Any, minimum: int = 0) -> int:
    """A count argument: an int of at least `minimum`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise errors.InvalidConfiguration(f"{name} must be an integer of at least {minimum}, not {value!r}")
    return value


def batch_receive_policy_of(policy: Any) -> BatchReceivePolicy:
    """`batch_receive_policy`: ours or the official ConsumerBatchReceivePolicy (None: the default)."""
    if policy is None:
        return BatchReceivePolicy()
    inner = policy.policy() if callable(getattr(policy, "policy", None)) else policy
    if isinstance(inner, BatchReceivePolicy):
        return inner
    try:
        return BatchReceivePolicy.of(inner.getMaxNumMessages(), inner.getMaxNumBytes(), inner.getTimeoutMs())
    except (AttributeError, ValueError) as exc:
        raise errors.InvalidConfiguration(f"batch_receive_policy must be a ConsumerBatchReceivePolicy, not "
                                          f"{policy!r} ({exc})") from None


def regex_mode_of(mode: Any) -> int:
    """`regex_subscription_mode`: ours or the official enum (PersistentOnly when None)."""
    if mode is None:
        return RegexSubscriptionMode.PersistentOnly
    try:
        return RegexSubscriptionMode(int(mode))
    except (TypeError, ValueError):
        raise errors.InvalidConfiguration(f"regex_subscription_mode must be PersistentOnly, NonPersistentOnly or "
                                          f"AllTopics, not {mode!r}") from None


def schema_of(schema: Any) -> Schema | None:
    """`schema=`: one of magnetar.client.schema's; BytesSchema (the default) changes nothing.
    The schema package (and fastavro, the schema registry's model) loads with the first schema."""
    if schema is None:
        return None
    from magnetar.client.schema import BytesSchema, Schema  # noqa: PLC0415 (loaded when schemas are used)

    if isinstance(schema, BytesSchema):
        return None
    if not isinstance(schema, Schema):
        raise errors.InvalidConfiguration(f"schema must be one of magnetar.client.schema's schemas (AvroSchema, "
                                          f"JsonSchema, StringSchema, ...), not {type(schema).__name__}")
    return schema


def key_reader_of(reader: Any) -> CryptoKeyReader | None:
    if reader is None or isinstance(reader, CryptoKeyReader):
        return reader
    raise errors.InvalidConfiguration(f"crypto_key_reader must be magnetar.client's CryptoKeyReader (or a subclass), "
                                      f"not {type(reader).__module__}.{type(reader).__name__}")


def encryption_keys_of(names: Any, reader: Any) -> tuple[str, ...]:
    """`encryption_key`: a key name, or (beyond the official Python client, as its C++ and Java
    cores allow) a list of them; every entry's data key is wrapped under each."""
    if not names:
        return ()
    keys = (names,) if isinstance(names, str) else tuple(names)
    if not all(isinstance(name, str) and name for name in keys):
        raise errors.InvalidConfiguration(f"encryption_key must be a key name or a list of names, not {names!r}")
    if reader is None:
        raise errors.InvalidConfiguration("encryption_key needs a crypto_key_reader to find the public keys")
    return keys


def failure_action_of(action: Any) -> int:
    """`crypto_failure_action`: ours or the official client's enum (FAIL when None)."""
    if action is None:
        return ConsumerCryptoFailureAction.FAIL
    try:
        return ConsumerCryptoFailureAction(int(action))
    except (TypeError, ValueError):
        raise errors.InvalidConfiguration(f"crypto_failure_action must be FAIL, DISCARD or CONSUME, not {action!r}"
                                          ) from None


def processors_of(spec: Any) -> ProcessorSet | None:
    """`payload_processor=`: an instance, a name (built-in or entry point), or a list of them."""
    try:
        return resolve_processors(spec)
    except (ValueError, TypeError, ImportError) as exc:
        raise errors.InvalidConfiguration(f"payload_processor: {exc}") from exc


def start_id_of(value: Any) -> MessageId:
    if value is None:
        raise ValueError("a reader needs a start message id")
    text = str(value)
    if text == "(-1,-1,-1,-1)":
        return MessageId.earliest
    if text == "(9223372036854775807,9223372036854775807,-1,-1)":
        return MessageId.latest
    return as_message_id(value)


def dead_letter_policy_of(policy: Any) -> DeadLetterPolicy | None:
    if policy is None or isinstance(policy, DeadLetterPolicy):
        return policy
    # the official ConsumerDeadLetterPolicy exposes these as properties
    return DeadLetterPolicy(policy.max_redeliver_count, policy.dead_letter_topic or None,
                            policy.initial_subscription_name or None, getattr(policy, "retry_letter_topic", None))


def apply_key_shared_policy(config: ConsumerConfig, policy: Any) -> None:
    mode = policy.key_shared_mode() if callable(getattr(policy, "key_shared_mode", None)) else \
        getattr(policy, "key_shared_mode", 0)
    config.key_shared_mode = int(mode)
    allow = getattr(policy, "allow_out_of_order_delivery", False)
    config.allow_out_of_order_delivery = bool(allow() if callable(allow) else allow)
    ranges = getattr(policy, "sticky_ranges", ())
    config.sticky_ranges = tuple(ranges() if callable(ranges) else ranges)
