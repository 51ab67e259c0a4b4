"""Kafka 4.0's topic configuration keys: each value a key takes and refuses, at its bounds, as
Kafka's LogConfig checks them (facts from apache/kafka), and each default as Kafka writes it."""

from __future__ import annotations

import re

import pytest

from magnetar.kafka.topic_configs import INT_MAX, KEYS, LONG_MAX, ConfigType, InvalidConfig, key, normalized


def test_every_default_is_a_value_its_key_takes_unchanged() -> None:
    assert len(KEYS) == 33
    for config in KEYS.values():
        if config.default:
            assert config.normalized(config.default) == config.default, config.name


@pytest.mark.parametrize(("name", "taken", "refused"), [
    ("retention.ms", ["-1", "0", str(LONG_MAX), " 5 "], ["-2", str(LONG_MAX + 1), "1e3", "x", ""]),
    ("retention.bytes", ["-5", str(-LONG_MAX - 1)], [str(-LONG_MAX - 2)]),
    ("segment.bytes", [str(1 << 20), str(INT_MAX)], [str((1 << 20) - 1), str(INT_MAX + 1)]),
    ("min.insync.replicas", ["1"], ["0", str(-INT_MAX - 2)]),
    ("local.retention.ms", ["-2"], ["-3"]),
    ("compression.lz4.level", ["1", "17"], ["0", "18"]),
    ("compression.zstd.level", ["-131072", "22"], ["-131073", "23"]),
    ("compression.gzip.level", ["-1", "1", "9"], ["-2", "0", "10"]),
    ("min.cleanable.dirty.ratio", ["0", "1", "0.5"], ["-0.1", "1.01", "inf", "nan"]),
    ("preallocate", ["true", "False"], ["yes", "1"]),
    ("message.timestamp.type", ["CreateTime", "LogAppendTime"], ["createtime", "Now"]),
    ("compression.type", ["producer", "zstd", "uncompressed"], ["none", "brotli"]),
    ("cleanup.policy", ["compact", "delete", "compact,delete", " delete , compact "], ["", "compact,", "shred"]),
    ("leader.replication.throttled.replicas", ["", "0:1"], []),
])
def test_values_at_their_bounds(name, taken, refused) -> None:
    config = key(name)
    for value in taken:
        config.normalized(value)
    for value in refused:
        with pytest.raises(InvalidConfig, match=re.escape(f"Invalid value {value} for configuration {name}: ")):
            config.normalized(value)


def test_the_refusals_say_what_the_key_takes() -> None:
    cases = {"retention.ms=-2": "Value must be at least -1", "segment.bytes=1": "Value must be at least 1048576",
             "min.cleanable.dirty.ratio=2": "Value must be between 0 and 1",
             "compression.lz4.level=0": "Value must be between 1 and 17",
             "compression.gzip.level=0": "Value must be -1 or between 1 and 9",
             "message.timestamp.type=x": "Value must be one of CreateTime, LogAppendTime",
             "cleanup.policy=x": "Value must be a list of compact, delete",
             "retention.ms=x": "expected a long", "segment.ms=1.5": "expected a long",
             "segment.bytes=x": "expected a int", "preallocate=x": "expected a boolean",
             "min.cleanable.dirty.ratio=x": "expected a double"}
    for case, words in cases.items():
        name, value = case.split("=")
        with pytest.raises(InvalidConfig) as caught:
            normalized({name: value})
        assert str(caught.value) == f"Invalid value {value} for configuration {name}: {words}"


def test_normalized_values_are_kafkas_spelling() -> None:
    assert normalized({"preallocate": "TRUE", "cleanup.policy": " compact , delete", "retention.ms": " 007",
                       "min.cleanable.dirty.ratio": "0.250", "segment.ms": None}) == {
        "preallocate": "true", "cleanup.policy": "compact,delete", "retention.ms": "7",
        "min.cleanable.dirty.ratio": "0.25", "segment.ms": None}
    with pytest.raises(InvalidConfig, match=r"^Unknown topic config name: message\.format\.version$"):
        normalized({"message.format.version": None})  # gone in Kafka 4.0, refused even to delete
    assert {config.type for config in KEYS.values()} == set(ConfigType)
