"""Kafka's topic configurations: every key a Kafka 4.0 broker takes, its type, default and valid values.

The facts are Kafka's (LogConfig and ServerLogConfigs): a client that asks DescribeConfigs
sees these names, types and defaults, and a key outside this table is refused with
INVALID_CONFIG, as a Kafka broker refuses it. What each key means on magnetar (a Pulsar
policy, or nothing but the stored value) is topic_settings'.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigs config_type values."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    LONG = 5
    DOUBLE = 6
    LIST = 7


class InvalidConfig(ValueError):
    """A value Kafka would refuse (INVALID_CONFIG); the message names the key and why."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: its type, its default as Kafka writes it, and what it takes (a range, or
    choices: of one value, or of each item of a list)."""

    name: str
    type: ConfigType
    default: str
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] = ()
    gzip_level: bool = False  # -1 or 1..9

    def normalized(self, raw: str) -> str:
        """`raw` as a Kafka broker stores it (numbers without spaces or signs, lists without
        blanks); InvalidConfig names the key and what it takes."""
        text = raw.strip()
        try:
            value = _PARSERS[self.type](text)
        except (ValueError, OverflowError):
            raise InvalidConfig(f"Invalid value {raw} for configuration {self.name}: expected a "
                                f"{self.type.name.lower()}") from None
        problem = self._problem(value)
        if problem is not None:
            raise InvalidConfig(f"Invalid value {raw} for configuration {self.name}: Value must be {problem}")
        return str(value).lower() if self.type == ConfigType.BOOLEAN else str(value)

    def _problem(self, value: object) -> str | None:
        """What `value` (parsed) must be instead, in words that follow "must be"; None if fine."""
        if self.gzip_level:
            return None if value == -1 or 1 <= value <= 9 else "-1 or between 1 and 9"  # type: ignore[operator]
        if self.choices:
            items = value.split(",") if self.type == ConfigType.LIST else [value]  # type: ignore[attr-defined]
            if all(item in self.choices for item in items):
                return None
            kind = "a list of" if self.type == ConfigType.LIST else "one of"
            return f"{kind} {', '.join(self.choices)}"
        if self.high is not None and not self.low <= value <= self.high:  # type: ignore[operator]
            return f"between {self.low} and {self.high}"
        if self.low is not None and value < self.low:  # type: ignore[operator]
            return f"at least {self.low}"
        return None


def _integer(text: str, limit: int) -> int:
    value = int(text)
    if not -limit - 1 <= value <= limit:
        raise OverflowError(text)
    return value


def _int(text: str) -> int:
    return _integer(text, INT_MAX)


def _long(text: str) -> int:
    return _integer(text, LONG_MAX)


def _boolean(text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ValueError(text)
    return lowered == "true"


def _double(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _list(text: str) -> str:
    """Items without their blanks, as Kafka splits a list; an empty item stays (and is refused
    by a key with choices: "compact," is not a list of policies)."""
    return ",".join(item.strip() for item in text.split(","))


_PARSERS: dict[ConfigType, Callable[[str], object]] = {
    ConfigType.BOOLEAN: _boolean, ConfigType.STRING: str, ConfigType.INT: _int,
    ConfigType.LONG: _long, ConfigType.DOUBLE: _double, ConfigType.LIST: _list,
}

_B, _S, _I, _L, _D, _LIST = (ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG,
                             ConfigType.DOUBLE, ConfigType.LIST)
_CODECS = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
KEYS: dict[str, ConfigKey] = {key.name: key for key in (
    ConfigKey("cleanup.policy", _LIST, "delete", choices=("compact", "delete")),
    ConfigKey("compression.type", _S, "producer", choices=_CODECS),
    ConfigKey("compression.gzip.level", _I, "-1", gzip_level=True),
    ConfigKey("compression.lz4.level", _I, "9", 1, 17),
    ConfigKey("compression.zstd.level", _I, "3", -131072, 22),
    ConfigKey("delete.retention.ms", _L, "86400000", 0),
    ConfigKey("file.delete.delay.ms", _L, "60000", 0),
    ConfigKey("flush.messages", _L, str(LONG_MAX), 1),
    ConfigKey("flush.ms", _L, str(LONG_MAX), 0),
    ConfigKey("follower.replication.throttled.replicas", _LIST, ""),
    ConfigKey("index.interval.bytes", _I, "4096", 0),
    ConfigKey("leader.replication.throttled.replicas", _LIST, ""),
    ConfigKey("local.retention.bytes", _L, "-2", -2),
    ConfigKey("local.retention.ms", _L, "-2", -2),
    ConfigKey("max.compaction.lag.ms", _L, str(LONG_MAX), 1),
    ConfigKey("max.message.bytes", _I, "1048588", 0),
    ConfigKey("message.timestamp.after.max.ms", _L, "3600000", 0),
    ConfigKey("message.timestamp.before.max.ms", _L, str(LONG_MAX), 0),
    ConfigKey("message.timestamp.type", _S, "CreateTime", choices=("CreateTime", "LogAppendTime")),
    ConfigKey("min.cleanable.dirty.ratio", _D, "0.5", 0, 1),
    ConfigKey("min.compaction.lag.ms", _L, "0", 0),
    ConfigKey("min.insync.replicas", _I, "1", 1),
    ConfigKey("preallocate", _B, "false"),
    ConfigKey("remote.log.copy.disable", _B, "false"),
    ConfigKey("remote.log.delete.on.disable", _B, "false"),
    ConfigKey("remote.storage.enable", _B, "false"),
    ConfigKey("retention.bytes", _L, "-1"),
    ConfigKey("retention.ms", _L, "604800000", -1),
    ConfigKey("segment.bytes", _I, "1073741824", 1024 * 1024),
    ConfigKey("segment.index.bytes", _I, "10485760", 4),
    ConfigKey("segment.jitter.ms", _L, "0", 0),
    ConfigKey("segment.ms", _L, "604800000", 1),
    ConfigKey("unclean.leader.election.enable", _B, "false"),
)}


def key(name: str) -> ConfigKey:
    """The key `name`; InvalidConfig for one no Kafka topic has."""
    found = KEYS.get(name)
    if found is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    return found


def normalized(configs: dict[str, str | None]) -> dict[str, str | None]:
    """Every (name, value) checked and normalized, None (back to the default) kept;
    InvalidConfig names the first bad one."""
    out: dict[str, str | None] = {}
    for name, value in configs.items():
        found = key(name)
        out[name] = None if value is None else found.normalized(value)
    return out
