"""The source's options: parsed and checked once, when the DataFrame is defined.

Names follow StreamNative's pulsar-spark connector and Spark's Kafka source, so users bring
what they know. Every mistake is reported with the option's name and what would be accepted,
at `load()` time rather than deep inside a task.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from magnetar.credentials.authentication import Authentication, authentication_from_plugin
from magnetar.credentials.security import ClientSecurity
from magnetar.formats.processor import load_processor
from magnetar.spark.decryption import KNOWN as DECRYPTION_KNOWN
from magnetar.spark.decryption import Decryption, decryption_options
from magnetar.spark.message_ids import is_message_id_json, message_id_offsets, time_spec
from magnetar.spark.offsets import EARLIEST, LATEST, OffsetSpec, TimeSpec
from magnetar.spark.option_errors import MagnetarOptionError, topic_option
from magnetar.spelling import did_you_mean

DEFAULT_SPLIT_BYTES = 32 * 1024 * 1024
KNOWN_READ = {
    "payloadProcessor": "payload processors (names or module:Class, comma-separated) read before the built-ins",
    "path": "a broker data directory (or .load(path))",
    "service.url": "pulsar://host:port of any Pulsar-compatible broker",
    "topic": "one topic",
    "topics": "comma-separated topics",
    "topicsPattern": "a regular expression over full topic names",
    "startingOffsets": "earliest, latest, JSON {topic: {partition: index}} or pulsar-spark's JSON {topic: "
                       "[message id bytes]}",
    "endingOffsets": "latest, JSON {topic: {partition: index}} (exclusive) or pulsar-spark's JSON {topic: "
                     "[message id bytes]} (the entry of the id included)",
    "startingTime": "broker time in ms (inclusive), or JSON {topic: ms}",
    "endingTime": "broker time in ms (exclusive), or JSON {topic: ms}",
    "failOnDataLoss": "true or false",
    "maxMessagesPerTrigger": "a positive message count per micro-batch",
    "propertiesFilter": 'JSON {"key": "value"}: keep messages with these properties, skip entries ruled out',
    "splitSizeBytes": "bytes of entries per Spark partition",
    "operationTimeoutSeconds": "service.url only: seconds to wait for the broker",
    "rowFormat": "magnetar (this source's columns) or pulsar-spark (the pulsar-spark connector's layout)",
    "admin.url": "pulsar-spark's admin URL: accepted, not needed (schemas come from where the topic is read)",
    "maxEntriesPerTrigger": "pulsar-spark's name for maxMessagesPerTrigger",
    "valueFormat": "typed (a typed value column when the topic has a schema) or bytes (the payload as it is)",
}
#: The pulsar-spark connector passes client settings under `pulsar.client.`; reads and
#: writes both take them.
SECURITY_KNOWN = {
    "pulsar.client.authPluginClassName": "AuthenticationToken, AuthenticationTls or AuthenticationBasic "
                                         "(org.apache.pulsar.client.impl.auth. names too)",
    "pulsar.client.authParams": "token:<jwt> or file:///path; tlsCertFile:..,tlsKeyFile:..; "
                                '{"userId":..,"password":..}',
    "pulsar.client.tlsTrustCertsFilePath": "CA certificates to check a pulsar+ssl:// broker with",
    "pulsar.client.tlsAllowInsecureConnection": "true: do not check the broker's certificate",
    "pulsar.client.tlsHostnameVerificationEnable": "true: check the broker's host name against its certificate",
    "pulsar.client.operationTimeoutMs": "pulsar-spark's operation timeout, in ms "
                                        "(operationTimeoutSeconds wins when both are given)",
}


class OptionNames(Mapping[str, str]):
    """Option names as the docs spell them (`startingOffsets`), each with what it takes, found
    in any case: Spark's options are case-insensitive and reach a data source lower-cased, so
    refusals name them as documented rather than as received."""

    def __init__(self, described: Mapping[str, str]) -> None:
        self._described = {name.lower(): (name, text) for name, text in described.items()}

    def __getitem__(self, name: str) -> str:
        return self._described[name.lower()][1]

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._described.values())

    def __len__(self) -> int:
        return len(self._described)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._described

    def spelt(self, name: str) -> str:
        """`name` as the docs spell it (as given when it is not an option)."""
        found = self._described.get(name.lower())
        return found[0] if found is not None else name


KNOWN = OptionNames({**KNOWN_READ, **SECURITY_KNOWN, **DECRYPTION_KNOWN})
log = logging.getLogger(__name__)
_said_ignored: set[str] = set()


@dataclass(frozen=True, slots=True)
class SourceOptions:
    path: str | None
    service_url: str | None
    topics: tuple[str, ...] = ()
    """Full topic names, partitioned or not (never a `-partition-N` unless the user named one)."""
    topics_pattern: str | None = None
    starting: OffsetSpec = field(default_factory=lambda: EARLIEST)
    ending: OffsetSpec = field(default_factory=lambda: LATEST)
    starting_time: TimeSpec = field(default_factory=TimeSpec)
    ending_time: TimeSpec = field(default_factory=TimeSpec)
    fail_on_data_loss: bool = True
    max_messages_per_trigger: int | None = None
    split_size_bytes: int = DEFAULT_SPLIT_BYTES
    operation_timeout_seconds: float = 30.0
    properties_filter: tuple[tuple[str, str], ...] = ()
    payload_processors: tuple[str, ...] = ()
    """Processor names (payloadProcessor) read before the built-ins; resolved on each executor."""
    security: ClientSecurity = field(default_factory=ClientSecurity)
    """TLS and credentials for service.url (the pulsar.client.* options)."""
    typed_values: bool = True
    """valueFormat=typed: a topic's schema types the `value` column."""
    pulsar_spark_rows: bool = False
    """rowFormat=pulsar-spark: the pulsar-spark connector's row layout."""
    decryption: Decryption = field(default_factory=Decryption)
    """decryptionKeyFile and cryptoFailureAction: encrypted messages."""

    @property
    def pattern(self) -> re.Pattern[str] | None:
        return re.compile(self.topics_pattern) if self.topics_pattern is not None else None


def integer_option(options: Mapping[str, str], name: str, minimum: int | None = None,
                   known: OptionNames = KNOWN) -> int | None:
    """The option (lower-cased `name`) as an int, None when absent; `known` words the error."""
    raw = options.get(name)
    if raw is None:
        return None
    spelt = known.spelt(name)
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise MagnetarOptionError(f"option {spelt!r} must be an integer ({known[name]}), got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise MagnetarOptionError(f"option {spelt!r} must be >= {minimum}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise MagnetarOptionError(f"option {name!r} must be true or false, got {raw!r}")
    return text == "true"


def known_options(options: Mapping[str, str], known: OptionNames, what: str) -> dict[str, str]:
    """The options lower-cased (Spark's options are case-insensitive), refused when one is
    unknown, with the documented name nearest each (broker config errors' "did you mean")."""
    lowered = {str(k).lower(): v for k, v in options.items()}
    unknown = sorted(k for k in lowered if k not in known)
    if unknown:
        named = []
        for name in unknown:
            hint = did_you_mean(name, known, n=1, ignore_case=True)
            named.append(f"{name} ({hint})" if hint else name)
        raise MagnetarOptionError(f"unknown {what}(s) {', '.join(named)}; "
                                  f"known: {', '.join(sorted(known, key=str.lower))}")
    return lowered


def check_service_url(service_url: str) -> None:
    if not re.match(r"^pulsar(\+ssl)?://[^/]+$", service_url.rstrip("/")):
        raise MagnetarOptionError(f"option 'service.url' must look like pulsar://host:port or pulsar+ssl://host:port, "
                                  f"got {service_url!r}")


def _offsets(options: Mapping[str, str], label: str, default: OffsetSpec, allow_earliest: bool) -> OffsetSpec:
    name = label.lower()
    raw = options.get(name)
    if raw is None:
        return default
    text = str(raw).strip()
    if text.lower() == "earliest":
        if not allow_earliest:
            raise MagnetarOptionError(f"option {label!r} cannot be 'earliest'")
        return EARLIEST
    if text.lower() == "latest":
        return LATEST
    parsed = _json_or_none(text)
    if isinstance(parsed, dict) and is_message_id_json(parsed):
        return message_id_offsets(label, parsed, allow_earliest)
    if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
        raise MagnetarOptionError(
            f"option {label!r} must be earliest, latest or JSON like "
            f'{{"persistent://public/default/t": {{"0": 42, "1": -2}}}} (index per partition, -1 for a '
            f"non-partitioned topic's partition key; -2 = earliest, -1 = latest) or pulsar-spark's "
            f'{{"persistent://public/default/t-partition-0": [8, 11, 16, 4]}} (message id bytes), got {text!r}'
        )
    per_partition: dict[tuple[str, int], int] = {}
    for topic, partitions in parsed.items():
        full = topic_option(topic, name)
        for partition, index in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                raise MagnetarOptionError(
                    f"option {label!r}: partition {partition!r} of {topic} is not a number"
                ) from None
            if not isinstance(index, int) or isinstance(index, bool) or index < -2:
                raise MagnetarOptionError(
                    f"option {label!r}: index for {topic} partition {partition} must be an integer >= -2, got {index!r}"
                )
            per_partition[(full, number)] = index
    return OffsetSpec(per_partition=per_partition)


def _json_or_none(text: str) -> object:
    """Parsed JSON, or None for text that is not JSON (the caller words the error)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _properties(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    raw = options.get("propertiesfilter")
    if raw is None:
        return ()
    parsed = _json_or_none(raw)
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise MagnetarOptionError(
            f'option \'propertiesFilter\' must be a JSON object of strings like {{"k": "v"}}, got {raw!r}'
        )
    return tuple(sorted(parsed.items()))


def _payload_processors(options: Mapping[str, str]) -> tuple[str, ...]:
    """Checked on the driver, so a wrong name fails `load()` instead of every task."""
    names = tuple(name.strip() for name in options.get("payloadprocessor", "").split(",") if name.strip())
    for name in names:
        try:
            load_processor(name)
        except ValueError as exc:
            raise MagnetarOptionError(f"option 'payloadProcessor': {exc}") from None
    return names


def security_options(options: Mapping[str, str]) -> ClientSecurity:
    """TLS and credentials for service.url, from the (lower-cased) pulsar.client.* options."""
    plugin = options.get("pulsar.client.authpluginclassname")
    try:
        authentication = authentication_from_plugin(plugin, options.get("pulsar.client.authparams", "")) \
            if plugin else Authentication()
    except ValueError as exc:
        raise MagnetarOptionError(f"option 'pulsar.client.authPluginClassName'/'pulsar.client.authParams': {exc}") \
            from None
    return ClientSecurity(
        authentication, options.get("pulsar.client.tlstrustcertsfilepath") or None,
        _bool(options, "pulsar.client.tlsallowinsecureconnection", False),
        _bool(options, "pulsar.client.tlshostnameverificationenable", False))


def parse_options(options: Mapping[str, str], *, streaming: bool | None = False) -> SourceOptions:
    """Check every option; raise MagnetarOptionError naming the first bad one.

    `streaming=None` (from DataSource.schema(), which does not know yet) skips the checks
    that depend on batch vs stream.
    """
    lowered = known_options(without_passed_through(options, KNOWN, ("pulsar.client.", "pulsar.reader.")), KNOWN,
                            "option")
    if "maxentriespertrigger" in lowered:
        if "maxmessagespertrigger" in lowered:
            raise MagnetarOptionError("give 'maxMessagesPerTrigger' or 'maxEntriesPerTrigger', not both")
        lowered["maxmessagespertrigger"] = lowered.pop("maxentriespertrigger")
    path = lowered.get("path") or None
    service_url = lowered.get("service.url") or None
    if path and service_url:
        raise MagnetarOptionError("give either 'path' (a data directory) or 'service.url' (a broker), not both")
    if not path and not service_url:
        raise MagnetarOptionError("give 'path' (a broker data directory, or .load(path)) or 'service.url'")
    if service_url:
        check_service_url(service_url)
    given = [k for k in ("topic", "topics", "topicspattern") if lowered.get(k)]
    if len(given) != 1:
        raise MagnetarOptionError(
            f"give exactly one of 'topic', 'topics', 'topicsPattern' (got {', '.join(given) or 'none'})"
        )
    topics: tuple[str, ...] = ()
    pattern = None
    if "topic" in given:
        topics = (topic_option(lowered["topic"], "topic"),)
    elif "topics" in given:
        topics = tuple(dict.fromkeys(topic_option(t, "topics") for t in lowered["topics"].split(",") if t.strip()))
        if not topics:
            raise MagnetarOptionError("option 'topics' names no topic")
    else:
        pattern = lowered["topicspattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise MagnetarOptionError(f"option 'topicsPattern' is not a regular expression: {exc}") from None
    starting_time = time_spec("startingTime", lowered.get("startingtime"))
    ending_time = time_spec("endingTime", lowered.get("endingtime"))
    if "startingoffsets" in lowered and starting_time.given:
        raise MagnetarOptionError("give 'startingOffsets' or 'startingTime', not both")
    if "endingoffsets" in lowered and ending_time.given:
        raise MagnetarOptionError("give 'endingOffsets' or 'endingTime', not both")
    if streaming is True and ("endingoffsets" in lowered or ending_time.given):
        raise MagnetarOptionError("'endingOffsets' and 'endingTime' are for batch queries; a stream has no end")
    max_per_trigger = integer_option(lowered, "maxmessagespertrigger", 1)
    if max_per_trigger is not None and streaming is False:
        raise MagnetarOptionError("'maxMessagesPerTrigger' applies to streams (spark.readStream) only")
    return SourceOptions(
        path=path,
        service_url=service_url.rstrip("/") if service_url else None,
        topics=topics,
        topics_pattern=pattern,
        starting=_offsets(lowered, "startingOffsets", EARLIEST if not streaming else LATEST, allow_earliest=True),
        ending=_offsets(lowered, "endingOffsets", LATEST, allow_earliest=False),
        starting_time=starting_time,
        ending_time=ending_time,
        fail_on_data_loss=_bool(lowered, "failondataloss", True),
        max_messages_per_trigger=max_per_trigger,
        split_size_bytes=integer_option(lowered, "splitsizebytes", 1) or DEFAULT_SPLIT_BYTES,
        operation_timeout_seconds=operation_timeout(lowered, KNOWN),
        properties_filter=_properties(lowered),
        payload_processors=_payload_processors(lowered),
        security=security_options(lowered),
        typed_values=choice_option(lowered, "valueFormat", ("typed", "bytes")) == "typed",
        pulsar_spark_rows=choice_option(lowered, "rowFormat", ("magnetar", "pulsar-spark")) == "pulsar-spark",
        decryption=decryption_options(lowered),
    )


def without_passed_through(options: Mapping[str, str], known: OptionNames,
                           prefixes: tuple[str, ...]) -> dict[str, str]:
    """The options other than pulsar-spark's client settings (`prefixes`) that have no meaning
    here, which are named in the log once per process (not per query or batch)."""
    ignored = sorted(k for k in options if k.lower().startswith(prefixes) and k.lower() not in known)
    unsaid = [k for k in ignored if k.lower() not in _said_ignored]
    if unsaid:
        _said_ignored.update(k.lower() for k in unsaid)
        log.warning("magnetar: ignoring pulsar-spark client setting(s) %s: this source's readers and producers are "
                    "its own (the settings it honours are listed in docs/spark.md)", ", ".join(unsaid))
    return {k: v for k, v in options.items() if k not in ignored}


def operation_timeout(options: Mapping[str, str], known: OptionNames) -> float:
    """operationTimeoutSeconds, else pulsar-spark's pulsar.client.operationTimeoutMs, else 30 s."""
    seconds = integer_option(options, "operationtimeoutseconds", 1, known)
    if seconds is not None:
        return float(seconds)
    millis = integer_option(options, "pulsar.client.operationtimeoutms", 1, known)
    return 30.0 if millis is None else millis / 1000


def choice_option(options: Mapping[str, str], name: str, choices: tuple[str, str]) -> str:
    """One of an option's two values (the first is its default), named in the refusal."""
    raw = options.get(name.lower(), choices[0]).strip().lower()
    if raw not in choices:
        raise MagnetarOptionError(f"option '{name}' must be {choices[0]} or {choices[1]}, "
                                  f"got {options[name.lower()]!r}")
    return raw
