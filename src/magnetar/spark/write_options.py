"""The sink's options and input columns: checked when the write is planned.

`df.write.format("magnetar")` / `df.writeStream.format("magnetar")` take the columns Spark's
Kafka sink and the pulsar-spark connector take (a `value`, maybe a `key`, a `topic` column
or option), plus Pulsar's own message fields. Any other column, or a column of the wrong
type, is an error naming it before a task starts: a typo must not silently drop a field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.client.enums import CompressionType
from magnetar.credentials.security import ClientSecurity
from magnetar.schemas import SchemaData
from magnetar.spark.option_errors import fail, topic_name_option, topic_option
from magnetar.spark.options import (
    SECURITY_KNOWN,
    OptionNames,
    check_service_url,
    choice_option,
    integer_option,
    known_options,
    operation_timeout,
    security_options,
    without_passed_through,
)
from magnetar.spark.value_schemas import value_schema_for

WRITE_KNOWN = OptionNames({
    "service.url": "pulsar://host:port (or pulsar+ssl://) of the broker to publish to",
    "topic": "the topic to write every row to (else a 'topic' column names each row's)",
    "compression": "none, lz4, zlib, zstd or snappy",
    "batchedFilterProperties": "comma-separated property names whose values every message of a batch shares "
    "(PIP-191)",
    "entryFormat": "pulsar (batches of messages) or arrow (one Arrow IPC entry per block of rows)",
    "batchingMaxMessages": "messages per Pulsar batch / rows per Arrow entry",
    "batchingMaxBytes": "bytes per Pulsar batch",
    "operationTimeoutSeconds": "seconds to wait for the broker",
    "checkpointLocation": "Spark's own (streams): where the query keeps its progress",
    "exactlyOnce": "false or true: each task's rows in a transaction, committed when Spark commits the "
                   "(micro-)batch (needs a broker with transactionCoordinatorEnabled)",
    "transactionTimeoutSeconds": "exactlyOnce: seconds a task's transaction may stay open before the broker "
                                 "aborts it (it spans the task and Spark's commit of the batch)",
    "commitNamespace": "exactlyOnce streams: the tenant/namespace of the topic recording each committed "
                       "micro-batch (default: the 'topic' option's)",
    "valueFormat": "typed (register the schema of the value column's type) or bytes (a binary or string value, "
                   "registering nothing)",
    **SECURITY_KNOWN,
})

COMPRESSIONS = {
    "none": CompressionType.NONE,
    "lz4": CompressionType.LZ4,
    "zlib": CompressionType.ZLib,
    "zstd": CompressionType.ZSTD,
    "snappy": CompressionType.SNAPPY,
}

ANY_TYPE = ()
COLUMN_TYPES: dict[str, tuple[str, ...]] = {
    "value": ANY_TYPE,
    "key": ("string",),
    "topic": ("string",),
    "properties": ("map<string,string>",),
    "event_time": ("timestamp", "timestamp_ntz"),
    "deliver_at": ("timestamp", "timestamp_ntz"),
}


@dataclass(frozen=True, slots=True)
class WriteOptions:
    service_url: str
    topic: str | None
    columns: tuple[str, ...]
    """The input's column names, in order (a subset of COLUMN_TYPES)."""
    value_schema: SchemaData | None = None
    """What the value column registers and is encoded with (None: its bytes as they are)."""
    compression: int = CompressionType.NONE
    batched_filter_properties: tuple[str, ...] = ()
    entry_format: str = "pulsar"
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    operation_timeout_seconds: float = 30.0
    security: ClientSecurity = field(default_factory=ClientSecurity)
    """TLS and credentials for service.url (the pulsar.client.* options), as reads take them."""
    exactly_once: bool = False
    """Each task's rows in one transaction, committed or aborted with Spark's batch (writer_commit)."""
    transaction_timeout_seconds: int = 300
    commit_namespace: str | None = None
    """Where an exactly-once stream records its committed micro-batches (tenant/namespace)."""


def _type_name(data_type: Any) -> str:
    return str(data_type.simpleString())


def check_columns(schema: Any, topic_option: str | None, entry_format: str) -> tuple[str, ...]:
    """The input's columns, refused with a message naming the first unknown or mistyped one."""
    names = [column.name for column in schema.fields]
    for column in schema.fields:
        name = column.name
        accepted = COLUMN_TYPES.get(name)
        if accepted is None:
            fail(f"column {name!r} is not one the magnetar sink writes; it takes "
                 f"{', '.join(COLUMN_TYPES)} (select or rename the columns first)")
        if accepted and _type_name(column.dataType) not in accepted:
            fail(f"column {name!r} must be {' or '.join(accepted)}, got {_type_name(column.dataType)}")
    if "value" not in names:
        fail(f"the magnetar sink needs a 'value' column; the input has {', '.join(names)}")
    if topic_option is None and "topic" not in names:
        fail("give the 'topic' option or a 'topic' column")
    if entry_format == "arrow" and "deliver_at" in names:
        fail("column 'deliver_at' needs entryFormat=pulsar: an Arrow entry is delivered as one")
    return tuple(names)


def parse_write_options(options: Mapping[str, str], schema: Any) -> WriteOptions:
    """Every write option and input column checked; MagnetarOptionError names the first bad one."""
    passed = without_passed_through(options, WRITE_KNOWN, ("pulsar.client.", "pulsar.producer."))
    lowered = known_options(passed, WRITE_KNOWN, "write option")
    service_url = (lowered.get("service.url") or "").rstrip("/")
    if not service_url:
        fail("give 'service.url': writes go through a broker")
    check_service_url(service_url)
    topic = topic_option(lowered["topic"], "topic") if lowered.get("topic") else None
    compression = str(lowered.get("compression", "none")).strip().lower()
    if compression not in COMPRESSIONS:
        fail(f"option 'compression' must be one of {', '.join(COMPRESSIONS)}, got {compression!r}")
    entry_format = str(lowered.get("entryformat", "pulsar")).strip().lower()
    if entry_format not in ("pulsar", "arrow"):
        fail(f"option 'entryFormat' must be pulsar or arrow, got {entry_format!r}")
    columns = check_columns(schema, topic, entry_format)
    value_type = next(f.dataType for f in schema.fields if f.name == "value")
    typed = choice_option(lowered, "valueFormat", ("typed", "bytes")) == "typed"
    if (entry_format == "arrow" or not typed) and _type_name(value_type) not in ("binary", "string"):
        fail(f"column 'value' must be binary or string with {'entryFormat=arrow' if typed else 'valueFormat=bytes'}, "
             f"got {_type_name(value_type)}")
    filter_names = tuple(n.strip() for n in str(lowered.get("batchedfilterproperties", "")).split(",") if n.strip())
    default_rows = 10_000 if entry_format == "arrow" else 1000
    exactly_once = choice_option(lowered, "exactlyOnce", ("false", "true")) == "true"
    if exactly_once and entry_format == "arrow":
        fail("option 'exactlyOnce' needs entryFormat=pulsar (Arrow entries are not sent in transactions)")
    return WriteOptions(
        service_url=service_url,
        topic=topic,
        columns=columns,
        value_schema=value_schema_for(value_type) if typed and entry_format == "pulsar" else None,
        compression=int(COMPRESSIONS[compression]),
        batched_filter_properties=filter_names,
        entry_format=entry_format,
        batching_max_messages=integer_option(lowered, "batchingmaxmessages", 1, WRITE_KNOWN) or default_rows,
        batching_max_bytes=integer_option(lowered, "batchingmaxbytes", 1, WRITE_KNOWN) or 128 * 1024,
        operation_timeout_seconds=operation_timeout(lowered, WRITE_KNOWN),
        security=security_options(lowered),
        exactly_once=exactly_once,
        transaction_timeout_seconds=integer_option(lowered, "transactiontimeoutseconds", 1, WRITE_KNOWN) or 300,
        commit_namespace=_commit_namespace(lowered, topic),
    )


def _commit_namespace(lowered: Mapping[str, str], topic: str | None) -> str | None:
    """The namespace of the exactly-once stream's commit records: the option's, else the topic's."""
    raw = str(lowered.get("commitnamespace") or "").strip()
    if raw:
        return topic_name_option(f"{raw}/probe", "commitNamespace").namespace_name
    return topic_name_option(topic, "topic").namespace_name if topic is not None else None

